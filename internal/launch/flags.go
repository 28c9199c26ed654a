package launch

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Options is a parsed hvdrun command line. Zero values and nil pointers mean
// "not given": the launcher then leaves the matching HOROVOD_* variable to
// the worker's own environment and default.
type Options struct {
	NumProc           int           // -np, --num-proc (required, > 0)
	Hosts             string        // -H, --hosts "a:2,b:2" (exclusive with Hostfile)
	Hostfile          string        // -hostfile, --hostfile
	Env               []string      // -x VAR or -x VAR=value, in command-line order
	SSHPort           int           // -p, --ssh-port (0 = ssh's default)
	SSHIdentityFile   string        // -i, --ssh-identity-file
	StartTimeout      time.Duration // --start-timeout seconds (0 = HOROVOD_START_TIMEOUT or 30 s)
	OutputDir         string        // --output-filename DIR
	Verbose           bool          // --verbose
	TimelineFilename  string        // --timeline-filename → HOROVOD_TIMELINE
	MetricsPort       int           // --metrics-port: hvdrun serves /metrics and the status page (0: off)
	MetricsAddr       string        // --metrics-addr (default 127.0.0.1)
	MetricsTokenFile  string        // --metrics-token-file: where hvdrun writes the scrape token
	FusionThresholdMB *float64      // --fusion-threshold-mb → HOROVOD_FUSION_THRESHOLD (bytes)
	CycleTimeMS       *float64      // --cycle-time-ms → HOROVOD_CYCLE_TIME
	NetworkInterfaces []string      // --network-interfaces a,b (and repeatable --network-interface)
	GlooTimeout       *int          // --gloo-timeout-seconds → HOROVOD_GLOO_TIMEOUT_SECONDS
	CacheCapacity     *int          // --cache-capacity → HOROVOD_CACHE_CAPACITY
	LogLevel          string        // --log-level, upper case → HOROVOD_LOG_LEVEL
	HierAllreduce     *bool         // --(no-)hierarchical-allreduce → HOROVOD_HIERARCHICAL_ALLREDUCE
	BindTo            string        // --bind-to auto|core|none → HVD_BIND_TO (workers bind themselves); "": auto unless HVD_BIND_TO is set
	HierAllgather     *bool         // --(no-)hierarchical-allgather → HOROVOD_HIERARCHICAL_ALLGATHER
	Encrypt           string        // --encrypt[=cross-host|all|off] → HVD_ENCRYPT ("" = not given)
	Autotune          Autotune      // --autotune and its settings → HOROVOD_AUTOTUNE*
	CheckBuild        bool          // -cb, --check-build: print the build table instead of running
	MPI               bool          // --mpi: start the ranks with mpirun (mpi.go)
	Gloo              bool          // --gloo: hvdrun's own process manager (the default)
	MPIArgs           string        // --mpi-args "...": extra mpirun arguments (with --mpi)
	Command           []string      // the worker command and its arguments (non-empty unless CheckBuild)

	Elastic ElasticOptions // elastic flags (elastic_flags.go)
}

// Autotune holds horovodrun's autotuning flags.
type Autotune struct {
	On             bool     // --autotune → HOROVOD_AUTOTUNE=1
	LogFile        string   // --autotune-log-file → HOROVOD_AUTOTUNE_LOG
	WarmupSamples  *int     // --autotune-warmup-samples → HOROVOD_AUTOTUNE_WARMUP_SAMPLES
	StepsPerSample *int     // --autotune-steps-per-sample → HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
	MaxSamples     *int     // --autotune-bayes-opt-max-samples → HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES
	Noise          *float64 // --autotune-gaussian-process-noise → HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE
}

// flagDef describes one hvdrun flag. names lists every spelling, the
// canonical one first; takesValue is false for switches.
type flagDef struct {
	names      []string
	metavar    string
	takesValue bool
	// implied, for a switch that may take a value after '=' (--encrypt or
	// --encrypt=all), is the value when none is given.
	implied string
	// nargs is 2 for a flag followed by two values (--blacklist-cooldown-range
	// MIN MAX); set then gets them joined by a space.
	nargs int
	help  string
	set   func(o *Options, name, v string) error
}

// LogLevels are the values --log-level accepts (case-insensitive), as in
// horovodrun.
var LogLevels = []string{"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// flagDefs is the flag table; Usage prints it in this order.
var flagDefs = []flagDef{
	{names: []string{"-np", "--num-proc"}, metavar: "N", takesValue: true,
		help: "total number of worker processes (required)",
		set:  func(o *Options, n, v string) error { return setPositiveInt(&o.NumProc, n, v) }},
	{names: []string{"-H", "--hosts"}, metavar: "HOST:SLOTS,...", takesValue: true,
		help: "hosts and their slots (default localhost:<np>)",
		set: func(o *Options, n, v string) error {
			switch {
			case o.Hosts != "": // only a -H sets it, never to ""
				return usageErrorf("%s given twice (%q, then %q): list every host in one -H, e.g. -H a:2,b:2", n, o.Hosts, v)
			case strings.TrimSpace(v) == "":
				return usageErrorf("%s needs at least one host (host:slots,...); leave it out to run on localhost", n)
			}
			o.Hosts = v
			return nil
		}},
	{names: []string{"--hostfile", "-hostfile"}, metavar: "FILE", takesValue: true,
		help: "file with one '<host> slots=<n>' (or '<host>:<n>') per line; # comments",
		set: func(o *Options, n, v string) error {
			if strings.TrimSpace(v) == "" {
				return usageErrorf("%s needs a file name", n)
			}
			o.Hostfile = v
			return nil
		}},
	{names: []string{"-x"}, metavar: "VAR[=VALUE]", takesValue: true,
		help: "export VAR (hvdrun's value, or VALUE) to every worker; repeatable",
		set: func(o *Options, n, v string) error {
			name, _, _ := strings.Cut(v, "=")
			if !envNameRE.MatchString(name) {
				return usageErrorf("%s %q: %q is not a valid environment variable name", n, v, name)
			}
			o.Env = append(o.Env, v)
			return nil
		}},
	{names: []string{"-p", "--ssh-port"}, metavar: "PORT", takesValue: true,
		help: "ssh port for remote hosts",
		set: func(o *Options, n, v string) error {
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				return usageErrorf("%s %q: want a port number in 1..65535", n, v)
			}
			o.SSHPort = p
			return nil
		}},
	{names: []string{"-i", "--ssh-identity-file"}, metavar: "FILE", takesValue: true,
		help: "ssh identity file for remote hosts",
		set:  func(o *Options, n, v string) error { o.SSHIdentityFile = v; return nil }},
	{names: []string{"--start-timeout"}, metavar: "SECONDS", takesValue: true,
		help: "time allowed for ssh checks and process start (default $HOROVOD_START_TIMEOUT or 30)",
		set: func(o *Options, n, v string) error {
			var s int
			if err := setPositiveInt(&s, n, v); err != nil {
				return err
			}
			o.StartTimeout = time.Duration(s) * time.Second
			return nil
		}},
	{names: []string{"--output-filename"}, metavar: "DIR", takesValue: true,
		help: "also write each rank's output to DIR/rank.<rank>/{stdout,stderr}",
		set:  func(o *Options, n, v string) error { o.OutputDir = v; return nil }},
	{names: []string{"--verbose"},
		help: "print the rank assignment and the worker environment to stderr",
		set:  func(o *Options, n, v string) error { o.Verbose = true; return nil }},
	{names: []string{"--timeline-filename"}, metavar: "FILE", takesValue: true,
		help: "write a Horovod timeline (HOROVOD_TIMELINE)",
		set:  func(o *Options, n, v string) error { o.TimelineFilename = v; return nil }},
	{names: []string{"--metrics-port"}, metavar: "PORT", takesValue: true,
		help: "serve the job's Prometheus metrics (/metrics) and live status page (/, /status.json) on PORT (docs/observability.md)",
		set: func(o *Options, n, v string) error {
			if err := setPositiveInt(&o.MetricsPort, n, v); err != nil || o.MetricsPort > 65535 {
				return usageErrorf("%s %q: want a port number, 1 to 65535", n, v)
			}
			return nil
		}},
	{names: []string{"--metrics-addr"}, metavar: "ADDR", takesValue: true,
		help: "the address --metrics-port binds (default 127.0.0.1; beyond loopback every request needs the job's metrics token)",
		set:  func(o *Options, n, v string) error { o.MetricsAddr = v; return nil }},
	{names: []string{"--metrics-token-file"}, metavar: "FILE", takesValue: true,
		help: "write the metrics token there (mode 0600) for Prometheus's authorization.credentials_file",
		set:  func(o *Options, n, v string) error { o.MetricsTokenFile = v; return nil }},
	{names: []string{"--fusion-threshold-mb"}, metavar: "MB", takesValue: true,
		help: "fusion buffer size in MiB (HOROVOD_FUSION_THRESHOLD, in bytes)",
		set:  func(o *Options, n, v string) error { return setNonNegFloat(&o.FusionThresholdMB, n, v) }},
	{names: []string{"--cycle-time-ms"}, metavar: "MS", takesValue: true,
		help: "background loop cycle time in ms (HOROVOD_CYCLE_TIME)",
		set:  func(o *Options, n, v string) error { return setNonNegFloat(&o.CycleTimeMS, n, v) }},
	{names: []string{"--network-interfaces"}, metavar: "IF,...", takesValue: true,
		help: "network interfaces to use (HOROVOD_GLOO_IFACE=first, NCCL_SOCKET_IFNAME=all)",
		set: func(o *Options, n, v string) error {
			o.NetworkInterfaces = nil
			return addInterfaces(o, n, v)
		}},
	{names: []string{"--network-interface"}, metavar: "IF", takesValue: true,
		help: "deprecated: one interface, repeatable",
		set:  addInterfaces},
	{names: []string{"--gloo-timeout-seconds"}, metavar: "SECONDS", takesValue: true,
		help: "rendezvous timeout, and how long a collective waits for a live rank that sends nothing before failing (HOROVOD_GLOO_TIMEOUT_SECONDS, default 30)",
		set:  func(o *Options, n, v string) error { return setNonNegIntPtr(&o.GlooTimeout, n, v) }},
	{names: []string{"--cache-capacity"}, metavar: "N", takesValue: true,
		help: "response cache entries, 0 disables (HOROVOD_CACHE_CAPACITY)",
		set:  func(o *Options, n, v string) error { return setNonNegIntPtr(&o.CacheCapacity, n, v) }},
	{names: []string{"--autotune"},
		help: "tune the fusion threshold, the cycle time and hierarchical collectives during the first steps, then keep the best (HOROVOD_AUTOTUNE)",
		set:  func(o *Options, n, v string) error { o.Autotune.On = true; return nil }},
	{names: []string{"--autotune-log-file"}, metavar: "FILE", takesValue: true,
		help: "CSV of every autotuning trial, written by rank 0 (HOROVOD_AUTOTUNE_LOG)",
		set:  func(o *Options, n, v string) error { o.Autotune.LogFile = v; return nil }},
	{names: []string{"--autotune-warmup-samples"}, metavar: "N", takesValue: true,
		help: "autotuning trials discarded first (default 3)",
		set:  func(o *Options, n, v string) error { return setNonNegIntPtr(&o.Autotune.WarmupSamples, n, v) }},
	{names: []string{"--autotune-steps-per-sample"}, metavar: "N", takesValue: true,
		help: "steps per autotuning sample (default 10)",
		set:  func(o *Options, n, v string) error { return setPositiveIntPtr(&o.Autotune.StepsPerSample, n, v) }},
	{names: []string{"--autotune-bayes-opt-max-samples"}, metavar: "N", takesValue: true,
		help: "trials of the Bayesian search (default 20)",
		set:  func(o *Options, n, v string) error { return setPositiveIntPtr(&o.Autotune.MaxSamples, n, v) }},
	{names: []string{"--autotune-gaussian-process-noise"}, metavar: "ALPHA", takesValue: true,
		help: "noise of the Gaussian process, from 0 to 1 (default 0.8)",
		set: func(o *Options, n, v string) error {
			if err := setNonNegFloat(&o.Autotune.Noise, n, v); err != nil {
				return err
			}
			if *o.Autotune.Noise > 1 {
				return usageErrorf("%s %q: want a number from 0 to 1", n, v)
			}
			return nil
		}},
	{names: []string{"--log-level"}, metavar: "LEVEL", takesValue: true,
		help: "worker log level: " + strings.Join(LogLevels, ", ") + " (HOROVOD_LOG_LEVEL)",
		set: func(o *Options, n, v string) error {
			u := strings.ToUpper(v)
			for _, l := range LogLevels {
				if u == l {
					o.LogLevel = u
					return nil
				}
			}
			return usageErrorf("%s %q: want one of %s", n, v, strings.Join(LogLevels, ", "))
		}},
	{names: []string{"--hierarchical-allreduce"},
		help: "hierarchical allreduce for sets that span hosts (HOROVOD_HIERARCHICAL_ALLREDUCE=1; hvd's default)",
		set:  func(o *Options, n, v string) error { o.HierAllreduce = ptrTo(true); return nil }},
	{names: []string{"--no-hierarchical-allreduce"},
		help: "flat TCP allreduce across hosts (HOROVOD_HIERARCHICAL_ALLREDUCE=0)",
		set:  func(o *Options, n, v string) error { o.HierAllreduce = ptrTo(false); return nil }},
	{names: []string{"--hierarchical-allgather"},
		help: "hierarchical allgather for sets that span hosts (HOROVOD_HIERARCHICAL_ALLGATHER=1; hvd's default)",
		set:  func(o *Options, n, v string) error { o.HierAllgather = ptrTo(true); return nil }},
	{names: []string{"--no-hierarchical-allgather"},
		help: "flat TCP allgather across hosts (HOROVOD_HIERARCHICAL_ALLGATHER=0)",
		set:  func(o *Options, n, v string) error { o.HierAllgather = ptrTo(false); return nil }},
	{names: []string{"--bind-to"}, metavar: "auto|core|none", takesValue: true,
		help: "bind each rank to one core (local rank i → i-th allowed CPU), as mpirun does for np <= 2 (HVD_BIND_TO): core binds unless ranks outnumber the host's allowed CPUs; auto (the default, unless HVD_BIND_TO is set) only when they are exactly as many; none never",
		set: func(o *Options, n, v string) error {
			switch v {
			case "auto", "core", "none":
				o.BindTo = v
				return nil
			}
			return usageErrorf("%s %q: want auto, core or none", n, v)
		}},
	{names: []string{"--encrypt"}, metavar: "[=cross-host|all|off]", implied: "cross-host",
		help: "encrypt and authenticate the TCP data connections between hosts (cross-host, the default) or all of them, loopback included (AES-256-GCM, keys from the job's secret; HVD_ENCRYPT)",
		set: func(o *Options, n, v string) error {
			switch v {
			case "cross-host", "all", "off":
				o.Encrypt = v
				return nil
			}
			return usageErrorf("%s=%q: want cross-host, all or off", n, v)
		}},
	{names: []string{"--gloo"},
		help: "start the ranks with hvdrun's own process manager (Gloo mode: the default)",
		set:  func(o *Options, n, v string) error { o.Gloo = true; return nil }},
	{names: []string{"--mpi"},
		help: "start the ranks with Open MPI's mpirun (HVD_MPIRUN overrides which), with the same store, environment, output prefixes and failure handling (docs/mpi.md)",
		set:  func(o *Options, n, v string) error { o.MPI = true; return nil }},
	{names: []string{"--mpi-args"}, metavar: "ARGS", takesValue: true,
		help: "extra arguments for mpirun, split on blanks (with --mpi)",
		set:  func(o *Options, n, v string) error { o.MPIArgs = v; return nil }},
	{names: []string{"--disable-cache"},
		help: "accepted for horovodrun compatibility (hvdrun caches nothing)",
		set:  func(o *Options, n, v string) error { return nil }},
	{names: []string{"-cb", "--check-build"},
		help: "print which frameworks, controllers and tensor operations this hvd has, and exit (-np and the command are then optional)",
		set:  func(o *Options, n, v string) error { o.CheckBuild = true; return nil }},
	{names: []string{"-v", "--version"},
		help: "print hvd's version and exit",
		set:  func(o *Options, n, v string) error { return ErrVersion }},
	{names: []string{"-h", "--help"},
		help: "print this help",
		set:  func(o *Options, n, v string) error { return ErrHelp }},
}

var flagIndex = func() map[string]*flagDef {
	m := make(map[string]*flagDef)
	for _, defs := range [][]flagDef{flagDefs, elasticFlagDefs} {
		for i := range defs {
			for _, n := range defs[i].names {
				if _, dup := m[n]; dup {
					panic("launch: duplicate flag " + n)
				}
				m[n] = &defs[i]
			}
		}
	}
	return m
}()

// ParseArgs parses hvdrun's arguments (without the program name) the way
// horovodrun's argparse does: flags may be spelled with one or two dashes as
// listed in the usage, values follow as the next argument or after '='
// (`-np 2`, `--num-proc=2`), one-letter flags also take attached values
// (`-Hhost:2`, `-xFOO=1`), a repeated flag overrides the earlier value except
// -x and --network-interface which accumulate. "--" or the first argument
// that does not start with '-' ends the flags; it and everything after it is
// the command. ParseArgs does no I/O. Errors wrap ErrUsage, or are ErrHelp
// (-h) or ErrVersion (-v). With -cb the options are returned with CheckBuild
// set and neither -np nor a command is required.
func ParseArgs(args []string) (*Options, error) {
	o := &Options{}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, val, hasVal := strings.Cut(a, "=")
		def := flagIndex[name]
		if def == nil && !strings.HasPrefix(a, "--") && len(a) > 2 {
			// One-letter flag with its value attached: -Hhost:2, -xFOO=bar, -p2222.
			if d := flagIndex[a[:2]]; d != nil && d.takesValue {
				def, name, val, hasVal = d, a[:2], a[2:], true
			}
		}
		if def == nil {
			return nil, usageErrorf("unknown flag %s", name)
		}
		if !def.takesValue && def.implied != "" {
			if !hasVal {
				val = def.implied
			}
		} else if !def.takesValue {
			if hasVal {
				return nil, usageErrorf("flag %s takes no value", name)
			}
		} else if !hasVal && def.nargs == 2 {
			if i+2 >= len(args) {
				return nil, usageErrorf("flag %s needs two values (%s)", name, def.metavar)
			}
			val = args[i+1] + " " + args[i+2]
			i += 2
		} else if !hasVal {
			if i+1 >= len(args) {
				return nil, usageErrorf("flag %s needs a value (%s)", name, def.metavar)
			}
			i++
			val = args[i]
		}
		if err := def.set(o, name, val); err != nil {
			return nil, err
		}
	}
	o.Command = append([]string(nil), args[i:]...)
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Options) validate() error {
	if o.CheckBuild {
		// As horovodrun: -cb makes -np optional and ignores the command.
		return nil
	}
	if err := o.validateElastic(); err != nil {
		return err
	}
	switch {
	case o.NumProc == 0:
		return usageErrorf("-np/--num-proc is required")
	case o.Hosts != "" && o.Hostfile != "":
		return usageErrorf("-H/--hosts and --hostfile are mutually exclusive")
	case len(o.Command) == 0:
		return usageErrorf("no command given (usage: hvdrun [flags] [--] command [args...])")
	case o.MPI && o.Gloo:
		return usageErrorf("--mpi and --gloo are mutually exclusive")
	case o.MPIArgs != "" && !o.MPI:
		return usageErrorf("--mpi-args needs --mpi")
	case o.MPI && o.IsElastic():
		return usageErrorf("--mpi does not run elastic jobs (hvdrun's own process manager does: drop --mpi)")
	}
	return nil
}

func setPositiveInt(dst *int, name, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return usageErrorf("%s %q: want a positive integer", name, v)
	}
	*dst = n
	return nil
}

func setPositiveIntPtr(dst **int, name, v string) error {
	var n int
	if err := setPositiveInt(&n, name, v); err != nil {
		return err
	}
	*dst = &n
	return nil
}

func setNonNegIntPtr(dst **int, name, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return usageErrorf("%s %q: want a non-negative integer", name, v)
	}
	*dst = &n
	return nil
}

func setNonNegFloat(dst **float64, name, v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return usageErrorf("%s %q: want a non-negative number", name, v)
	}
	*dst = &f
	return nil
}

func addInterfaces(o *Options, name, v string) error {
	for _, nic := range strings.Split(v, ",") {
		nic = strings.TrimSpace(nic)
		if nic == "" || strings.ContainsAny(nic, " \t/") {
			return usageErrorf("%s %q: want comma-separated interface names", name, v)
		}
		o.NetworkInterfaces = append(o.NetworkInterfaces, nic)
	}
	return nil
}

// Usage returns hvdrun's help text.
func Usage() string {
	var b strings.Builder
	b.WriteString("usage: hvdrun -np N [-H host:slots,... | --hostfile FILE] [flags] [--] command [args...]\n\n")
	b.WriteString("Starts N copies of command as one Horovod job (Gloo mode), serving the\nrendezvous store, and stops every rank when one fails.\n\nflags:\n")
	for _, d := range flagDefs {
		spell := strings.Join(d.names, ", ")
		if d.takesValue {
			spell += " " + d.metavar
		} else if d.implied != "" {
			spell += d.metavar
		}
		fmt.Fprintf(&b, "  %-40s %s\n", spell, d.help)
	}
	b.WriteString("\nenvironment: HVD_SSH (ssh command, default \"ssh\"), HVD_KILL_GRACE_SECONDS (SIGTERM→SIGKILL\ngrace, default 5), HOROVOD_START_TIMEOUT (default for --start-timeout), HVD_PYTHON (the\ninterpreter a command of bare python or python3 runs and --check-build asks; else the active venv's,\nelse the one next to hvdrun when it is installed in a venv; --check-build then asks python3 in PATH\nand /usr/bin/python3). hvdrun from a source checkout (bin/hvdrun) appends its build/python to\nPYTHONPATH.\n")
	b.WriteString(elasticUsage())
	return b.String()
}

func ptrTo[T any](v T) *T { return &v }
