package launch

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ElasticOptions are hvdrun's elastic flags, horovodrun's names and meaning.
// Zero values mean "not given".
type ElasticOptions struct {
	MinNP           int    // --min-np, --min-num-proc (default -np)
	MaxNP           int    // --max-np, --max-num-proc (default: no cap)
	DiscoveryScript string // --host-discovery-script (a shell command)
	SlotsPerHost    int    // --slots-per-host: slots of a bare discovered host (default 1)
	ResetLimit      *int   // --reset-limit (default: no limit)
	// --blacklist-cooldown-range MIN MAX, seconds; 0 0 = a blacklisted host
	// stays out for good.
	CooldownMin, CooldownMax int
	// --elastic-timeout seconds; 0 = HOROVOD_ELASTIC_TIMEOUT or 600 s.
	Timeout time.Duration
}

// IsElastic reports whether the command line asks for elastic mode:
// --host-discovery-script, --min-np or --max-np given (with -H or --hostfile
// and no script, the hosts are fixed: fault tolerance without scaling).
func (o *Options) IsElastic() bool {
	e := &o.Elastic
	return e.DiscoveryScript != "" || e.MinNP > 0 || e.MaxNP > 0
}

// Bounds of --blacklist-cooldown-range, as horovodrun.
const (
	MinCooldownSeconds = 1
	MaxCooldownSeconds = 3600
)

var elasticFlagDefs = []flagDef{
	{names: []string{"--min-np", "--min-num-proc"}, metavar: "N", takesValue: true,
		help: "fewest worker processes the job runs with (default -np)",
		set:  func(o *Options, n, v string) error { return setPositiveInt(&o.Elastic.MinNP, n, v) }},
	{names: []string{"--max-np", "--max-num-proc"}, metavar: "N", takesValue: true,
		help: "most worker processes the job runs with (default: as many as there are slots)",
		set:  func(o *Options, n, v string) error { return setPositiveInt(&o.Elastic.MaxNP, n, v) }},
	{names: []string{"--host-discovery-script"}, metavar: "SCRIPT", takesValue: true,
		help: "shell command run about once a second that prints the available hosts, one 'host' or 'host:slots' per line",
		set: func(o *Options, n, v string) error {
			if strings.TrimSpace(v) == "" {
				return usageErrorf("%s needs a command", n)
			}
			o.Elastic.DiscoveryScript = v
			return nil
		}},
	{names: []string{"--slots-per-host"}, metavar: "N", takesValue: true,
		help: "slots of a host the discovery script prints without ':slots' (default 1)",
		set:  func(o *Options, n, v string) error { return setPositiveInt(&o.Elastic.SlotsPerHost, n, v) }},
	{names: []string{"--reset-limit"}, metavar: "N", takesValue: true,
		help: "fail the job rather than start a new world after N resets (default: no limit)",
		set:  func(o *Options, n, v string) error { return setNonNegIntPtr(&o.Elastic.ResetLimit, n, v) }},
	{names: []string{"--blacklist-cooldown-range"}, metavar: "MIN MAX", takesValue: true, nargs: 2,
		help: fmt.Sprintf("a host whose worker failed gets no new worker for MIN·2^n + jitter seconds, at most MAX (%d ≤ MIN ≤ MAX ≤ %d), while its other workers keep training; default: out for good, its other workers stopped", MinCooldownSeconds, MaxCooldownSeconds),
		set: func(o *Options, n, v string) error {
			f := strings.Fields(v)
			if len(f) != 2 {
				return usageErrorf("%s needs two values, MIN MAX (seconds)", n)
			}
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			switch {
			case err1 != nil || err2 != nil:
				return usageErrorf("%s %s %s: want two whole numbers of seconds", n, f[0], f[1])
			case lo < MinCooldownSeconds:
				return usageErrorf("%s %d %d: MIN must be at least %d second", n, lo, hi, MinCooldownSeconds)
			case hi > MaxCooldownSeconds:
				return usageErrorf("%s %d %d: MAX must be at most %d seconds", n, lo, hi, MaxCooldownSeconds)
			case lo > hi:
				return usageErrorf("%s %d %d: MIN is above MAX", n, lo, hi)
			}
			o.Elastic.CooldownMin, o.Elastic.CooldownMax = lo, hi
			return nil
		}},
	{names: []string{"--elastic-timeout"}, metavar: "SECONDS", takesValue: true,
		help: "how long to wait for enough slots, and for discovery to recover (default $HOROVOD_ELASTIC_TIMEOUT or 600)",
		set: func(o *Options, n, v string) error {
			var s int
			if err := setPositiveInt(&s, n, v); err != nil {
				return err
			}
			o.Elastic.Timeout = time.Duration(s) * time.Second
			return nil
		}},
}

// validateElastic checks the elastic flags against each other and against
// -np, -H and --hostfile, and fills -np from --min-np. It runs before the
// generic checks of validate.
func (o *Options) validateElastic() error {
	e := &o.Elastic
	if !o.IsElastic() {
		var given []string
		if e.SlotsPerHost > 0 {
			given = append(given, "--slots-per-host")
		}
		if e.ResetLimit != nil {
			given = append(given, "--reset-limit")
		}
		if e.CooldownMax > 0 {
			given = append(given, "--blacklist-cooldown-range")
		}
		if e.Timeout > 0 {
			given = append(given, "--elastic-timeout")
		}
		if len(given) > 0 {
			return usageErrorf("%s only apply to an elastic job (give --host-discovery-script, --min-np or --max-np)", strings.Join(given, ", "))
		}
		return nil
	}
	switch {
	case e.MinNP > 0 && e.MaxNP > 0 && e.MinNP > e.MaxNP:
		return usageErrorf("--min-np %d is above --max-np %d", e.MinNP, e.MaxNP)
	case o.NumProc == 0 && e.MinNP == 0:
		return usageErrorf("-np/--num-proc (or --min-np) is required: the number of workers to start with")
	case o.NumProc > 0 && e.MinNP > 0 && o.NumProc < e.MinNP:
		return usageErrorf("-np %d is below --min-np %d", o.NumProc, e.MinNP)
	case o.NumProc > 0 && e.MaxNP > 0 && o.NumProc > e.MaxNP:
		return usageErrorf("-np %d is above --max-np %d", o.NumProc, e.MaxNP)
	}
	if o.NumProc == 0 {
		o.NumProc = e.MinNP
		if e.MaxNP > 0 && o.NumProc > e.MaxNP {
			o.NumProc = e.MaxNP
		}
	}
	if e.MinNP == 0 {
		e.MinNP = o.NumProc
	}
	if e.DiscoveryScript != "" {
		if o.Hosts != "" || o.Hostfile != "" {
			return usageErrorf("--host-discovery-script, -H/--hosts and --hostfile are mutually exclusive")
		}
	} else {
		if o.Hosts == "" && o.Hostfile == "" {
			return usageErrorf("an elastic job needs --host-discovery-script, or fixed hosts with -H/--hostfile")
		}
		if e.SlotsPerHost > 0 {
			return usageErrorf("--slots-per-host applies to the hosts a --host-discovery-script prints, and none is given")
		}
	}
	return nil
}

// elasticUsage is the part of Usage about elastic jobs.
func elasticUsage() string {
	var b strings.Builder
	b.WriteString("\nelastic flags (elastic mode: --host-discovery-script, --min-np or --max-np; without a\nscript, -H/--hostfile hosts are fixed and only failures change the world):\n")
	for _, d := range elasticFlagDefs {
		fmt.Fprintf(&b, "  %-40s %s\n", strings.Join(d.names, ", ")+" "+d.metavar, d.help)
	}
	b.WriteString("\nAn elastic job starts -np workers once that many slots are available, keeps them running across\n" +
		"resets, starts workers on new slots, blacklists the host of a failed worker and publishes each new\n" +
		"world in the rendezvous store (docs/elastic.md). Worker output lines carry the worker id:\n" +
		"[<host>:<slot>]<stdout>:. Environment: HOROVOD_ELASTIC_TIMEOUT (default for --elastic-timeout),\n" +
		"HVD_DISCOVERY_TIMEOUT_SECONDS (a discovery run that takes longer is killed; default 10).\n" +
		"Exit status: 0 when the last world finished; 1 when the driver ends the job (every worker or host\n" +
		"failed, too few slots, --reset-limit, a failure after training finished; the line says which and\n" +
		"which worker exited how); 127/126 when the command cannot be started; 128+N on signal N to hvdrun.\n")
	return b.String()
}
