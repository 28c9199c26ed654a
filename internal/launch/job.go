package launch

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// StoreServer is the rendezvous store hvdrun serves for its workers (the
// Horovod-compatible HTTP KV store of package sdk/rendezvous). Init declares
// the scope sizes (see RendezvousPlan) and is called once, before any worker
// starts. Close is called once, after every worker has exited.
type StoreServer interface {
	Port() int
	Init(plan map[string]int) error
	Close() error
}

// StoreFactory starts a rendezvous store listening on addr ("host:0" picks a
// free port) that authenticates requests with secret.
type StoreFactory func(addr string, secret []byte) (StoreServer, error)

// Runtime is what a Job takes from the process that runs it. Tests fill it
// with buffers and fakes; hvdrun's main fills it from the os package.
type Runtime struct {
	Stdout, Stderr io.Writer // workers' prefixed output and hvdrun's messages
	// Environ is hvdrun's environment (KEY=VALUE). Local ranks inherit it;
	// HVD_SSH, HVD_KILL_GRACE_SECONDS and HOROVOD_START_TIMEOUT are read
	// from it.
	Environ  []string
	Hostname string   // this machine's name; "" means os.Hostname()
	LocalIPs []net.IP // this machine's addresses; nil means LocalIPs()
	Dir      string   // workers' working directory; "" means os.Getwd()
	NewStore StoreFactory
	// Signals delivers the signals to forward to every worker's process
	// group (hvdrun's main subscribes SIGINT, SIGTERM and SIGHUP). May be nil.
	Signals <-chan os.Signal
	// NewElasticStore starts the store of an elastic job (one the driver can
	// write into); only elastic jobs need it.
	NewElasticStore ElasticStoreFactory
	// Monitor, when set, is told of processes and worlds (monitor.go).
	Monitor Monitor
}

// Defaults for the knobs read from the environment.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultKillGrace    = 5 * time.Second
)

// Job is a planned hvdrun job: hosts, rank assignment, environment and the
// way each rank is started. Create it with NewJob and run it once with Run.
type Job struct {
	Opts           *Options
	Slots          []Slot          // by rank
	Local          map[string]bool // host name → started on this machine
	RendezvousAddr string          // the address workers dial
	BindAddr       string          // the address the store listens on
	Extra          []KV            // resolved -x variables
	StartTimeout   time.Duration
	KillGrace      time.Duration
	SSH            []string // ssh command (HVD_SSH split on blanks, or "ssh")
	Dir            string
	// Elastic is the plan of an elastic job (nil for a static one); Slots
	// is then empty until Run has discovered the first world.
	Elastic *ElasticPlan

	rt Runtime
}

// NewJob checks and plans a job from parsed options: it reads the hostfile,
// assigns ranks, decides which hosts are local and which address workers use
// to reach the rendezvous store, and resolves -x variables. It starts
// nothing. Errors wrap ErrConfig except for a failed address lookup.
func NewJob(o *Options, rt Runtime) (*Job, error) {
	if rt.NewStore == nil {
		return nil, fmt.Errorf("hvdrun: internal error: no rendezvous store factory")
	}
	if rt.Stdout == nil {
		rt.Stdout = io.Discard
	}
	if rt.Stderr == nil {
		rt.Stderr = io.Discard
	}
	if rt.Hostname == "" {
		rt.Hostname, _ = os.Hostname()
	}
	if rt.LocalIPs == nil {
		rt.LocalIPs = LocalIPs()
	}
	j := &Job{Opts: o, rt: rt, Local: map[string]bool{}, Dir: rt.Dir}
	if j.Dir == "" {
		var err error
		if j.Dir, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("hvdrun: %w", err)
		}
	}

	var hosts []Host
	var err error
	switch {
	case o.Hostfile != "":
		hosts, err = ReadHostfile(o.Hostfile)
	case o.Hosts != "":
		hosts, err = ParseHosts(o.Hosts)
	default:
		var inSlurm bool
		if hosts, inSlurm, err = SlurmHosts(rt.Environ); err == nil && !inSlurm {
			hosts = []Host{{Name: "localhost", Slots: o.NumProc}}
		}
	}
	if err != nil {
		return nil, err
	}
	if o.IsElastic() {
		if j.Elastic, err = newElasticPlan(o, hosts, rt.Environ); err != nil {
			return nil, err
		}
	} else if j.Slots, err = Assign(hosts, o.NumProc); err != nil {
		return nil, err
	}
	if err := j.pickRendezvous(); err != nil {
		return nil, err
	}

	if j.Extra, err = ExtraEnv(o.Env, rt.Environ); err != nil {
		return nil, err
	}

	j.StartTimeout = o.StartTimeout
	if j.StartTimeout == 0 {
		j.StartTimeout = DefaultStartTimeout
		if v, ok := lookupEnv(rt.Environ, "HOROVOD_START_TIMEOUT"); ok && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, configErrorf("HOROVOD_START_TIMEOUT=%q: want a positive number of seconds", v)
			}
			j.StartTimeout = time.Duration(n) * time.Second
		}
	}
	j.KillGrace = DefaultKillGrace
	if v, ok := lookupEnv(rt.Environ, "HVD_KILL_GRACE_SECONDS"); ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1e6 {
			return nil, configErrorf("HVD_KILL_GRACE_SECONDS=%q: want a non-negative number of seconds", v)
		}
		j.KillGrace = time.Duration(f * float64(time.Second))
	}
	j.SSH = []string{"ssh"}
	if v, ok := lookupEnv(rt.Environ, "HVD_SSH"); ok && strings.TrimSpace(v) != "" {
		j.SSH = strings.Fields(v)
	}
	return j, nil
}

// pickRendezvous decides, from the hosts of j.Slots, which of them are this
// machine and the address workers dial for the store: loopback when every
// host is local, else the address of --network-interfaces or the one the
// route to the first remote host leaves from.
func (j *Job) pickRendezvous() error {
	var firstRemote string
	for _, s := range j.Slots {
		local := IsLocalHost(s.Hostname, j.rt.Hostname, j.rt.LocalIPs)
		j.Local[s.Hostname] = local
		if !local && firstRemote == "" {
			firstRemote = s.Hostname
		}
	}
	var err error
	switch {
	case firstRemote == "":
		j.RendezvousAddr = "127.0.0.1"
	case len(j.Opts.NetworkInterfaces) > 0:
		if j.RendezvousAddr, err = InterfaceIPv4(j.Opts.NetworkInterfaces[0]); err != nil {
			return err
		}
	default:
		if j.RendezvousAddr, err = RouteSourceIPv4(firstRemote); err != nil {
			return err
		}
	}
	j.BindAddr = StoreBindAddr(j.RendezvousAddr)
	return nil
}

// sshArgv is the ssh command line that runs script on host. It never
// contains the job's secret.
func (j *Job) sshArgv(host, script string) []string {
	argv := append([]string(nil), j.SSH...)
	argv = append(argv, "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no",
		"-o", "ConnectTimeout="+strconv.Itoa(max(1, int(j.StartTimeout.Seconds()))))
	if j.Opts.SSHPort != 0 {
		argv = append(argv, "-p", strconv.Itoa(j.Opts.SSHPort))
	}
	if j.Opts.SSHIdentityFile != "" {
		argv = append(argv, "-i", j.Opts.SSHIdentityFile)
	}
	return append(argv, host, script)
}

// RemoteScript is the command a remote login shell (sh, bash, dash, zsh)
// runs for one rank: change to dir (ignoring failure, as horovodrun does),
// read the secret key from the first line of stdin, then replace itself with
// the command under the given environment, with stdin from /dev/null. Every
// word is quoted with Quote.
func RemoteScript(dir string, env []KV, command []string) string {
	var b strings.Builder
	b.WriteString("cd " + Quote(dir) + " >/dev/null 2>&1; ")
	b.WriteString("read -r " + SecretEnv + " || exit 1; export " + SecretEnv + "; exec env")
	for _, kv := range env {
		b.WriteString(" " + Quote(kv.String()))
	}
	b.WriteString(" " + QuoteAll(command) + " </dev/null")
	return b.String()
}

// describe writes the --verbose report: the rank table, the environment
// every rank gets (secret redacted) and the ssh command of remote ranks.
func (j *Job) describe(w io.Writer, port int) {
	var b strings.Builder
	hosts := map[string]bool{}
	for _, s := range j.Slots {
		hosts[s.Hostname] = true
	}
	fmt.Fprintf(&b, "hvdrun: %d ranks on %d hosts; rendezvous store at %s:%d (listening on %s)\n",
		len(j.Slots), len(hosts), j.RendezvousAddr, port, j.BindAddr)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  rank\thost\tlocal_rank\tlocal_size\tcross_rank\tcross_size\tstarted by")
	for _, s := range j.Slots {
		how := "exec"
		if !j.Local[s.Hostname] {
			how = "ssh"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Rank, s.Hostname, s.LocalRank, s.LocalSize, s.CrossRank, s.CrossSize, how)
	}
	tw.Flush()
	b.WriteString("hvdrun: every rank gets (local ranks also inherit hvdrun's environment, remote ones their login environment):\n")
	job := JobEnv(j.Opts, j.RendezvousAddr, port)
	for _, kv := range append(append(append([]KV(nil), j.Extra...), job...), KV{SecretEnv, "x"}) {
		b.WriteString("  " + redacted(kv) + "\n")
	}
	b.WriteString("hvdrun: and per rank HOROVOD_HOSTNAME, _RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE as in the table\n")
	for _, s := range j.Slots {
		if !j.Local[s.Hostname] {
			argv := j.sshArgv(s.Hostname, RemoteScript(j.Dir, RemoteEnv(j.Extra, job, s), j.Opts.Command))
			fmt.Fprintf(&b, "hvdrun: rank %d: %s\n", s.Rank, QuoteAll(argv))
		}
	}
	io.WriteString(w, b.String()) //nolint:errcheck
}
