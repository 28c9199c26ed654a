// Command hvdrun launches an hvd (or Horovod) job the way `horovodrun --gloo`
// does: it places -np ranks on the hosts given with -H or --hostfile, serves
// the rendezvous store, starts every rank (locally, or through ssh) with the
// HOROVOD_* environment, prefixes their output with the rank, and stops the
// whole job when one rank fails.
//
//	hvdrun -np 4 python train.py
//	hvdrun -np 8 -H node1:4,node2:4 --network-interfaces eth0 python train.py
//
//	hvdrun --check-build    # what this hvd offers, in horovodrun's table
//	hvdrun --version
//
// With --host-discovery-script, --min-np or --max-np the job is elastic
// (docs/elastic.md): workers survive resets, new hosts get new workers, the
// host of a failed worker is blacklisted.
//
// Exit status: 0 when every rank exited 0; the first failing rank's status
// (128+signal when it was killed); 2 for usage and configuration errors; 1
// when the job could not be set up. An elastic job that fails exits 1 (the
// driver's verdict, as horovodrun's; the worker's status is in the line),
// 127/126 when its command cannot start. Run `hvdrun --help` for the flags.
//
// The work is done by package internal/launch; this file only wires it to
// the process: arguments, environment, signals and the rendezvous store.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hvdorg/hvd/internal/launch"
	"github.com/hvdorg/hvd/internal/pyfind"
	"github.com/hvdorg/hvd/internal/version"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// checkBuildTimeout bounds each Python interpreter --check-build asks.
const checkBuildTimeout = 15 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is hvdrun without os.Exit, returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	// Subscribe before anything starts, so that a signal is never lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	opts, err := launch.ParseArgs(args)
	switch {
	case errors.Is(err, launch.ErrHelp):
		fmt.Fprint(stdout, launch.Usage())
		return 0
	case errors.Is(err, launch.ErrVersion):
		fmt.Fprintln(stdout, version.Version)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "%v\n\n%s", err, launch.Usage())
		return launch.ExitCode(err)
	}
	// bin/hvdrun of a source checkout makes the checkout's build/python
	// importable (appended to PYTHONPATH: the user's entries come first),
	// so `make python; bin/hvdrun -np 2 python3 train.py` works from any
	// directory and --check-build sees that package.
	finder := pyfind.New(os.Environ())
	finder.Environ = pyfind.WithPythonPath(finder.Environ, pyfind.CheckoutPackage(finder.Exe))
	// A command of bare "python" or "python3" runs the interpreter the user
	// evidently means when hvdrun knows one PATH would not give: HVD_PYTHON,
	// the active venv's, or the venv hvdrun is installed in (not activated).
	// hvdrun says so.
	if len(opts.Command) > 0 && (opts.Command[0] == "python" || opts.Command[0] == "python3") {
		c, ok := finder.Explicit("", "")
		if !ok {
			c, ok = finder.Environment()
		}
		onPath, err := finder.LookPath(opts.Command[0])
		if ok && (err != nil || filepath.Dir(onPath) != filepath.Dir(c.Python)) { // not what PATH gives already
			fmt.Fprintf(stderr, "hvdrun: %s is %s (%s)\n", opts.Command[0], c.Python, c.Why)
			opts.Command[0] = c.Python
		}
	}
	if opts.CheckBuild {
		fmt.Fprint(stdout, launch.CheckBuild(context.Background(), version.Version, finder, opts.Verbose, checkBuildTimeout))
		return 0
	}
	rt := launch.Runtime{
		Stdout:   stdout,
		Stderr:   stderr,
		Environ:  finder.Environ,
		NewStore: newStore,
		Signals:  sigs,

		NewElasticStore: newElasticStore,
	}
	if opts.MetricsPort != 0 { // metrics.go
		ob, err := startObserver(opts)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		defer ob.close()
		fmt.Fprintf(stderr, "hvdrun: metrics on http://%s/metrics, status page on http://%s/\n", ob.srv.Addr(), ob.srv.Addr())
		rt.Monitor = ob
		rt.NewStore = func(addr string, secret []byte) (launch.StoreServer, error) {
			s, err := newStore(addr, secret)
			if err == nil {
				err = ob.attach(s.(storeAdapter).Server, secret)
			}
			return s, err
		}
		rt.NewElasticStore = func(addr string, secret []byte) (launch.ElasticStore, error) {
			s, err := newElasticStore(addr, secret)
			if err == nil {
				err = ob.attach(s.(storeAdapter).Server, secret)
			}
			return s, err
		}
	}
	job, err := launch.NewJob(opts, rt)
	if err == nil {
		err = job.Run(context.Background())
	}
	var ee *launch.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Reported) {
		fmt.Fprintln(stderr, err)
	}
	return launch.ExitCode(err)
}

// newStore starts the job's rendezvous store (package sdk/rendezvous).
func newStore(addr string, secret []byte) (launch.StoreServer, error) {
	s, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: addr, Secret: secret})
	if err != nil {
		return nil, err
	}
	return storeAdapter{s}, nil
}

// newElasticStore starts the store of an elastic job, which the driver also
// writes into (rendezvous.Server.Set, AddPlan).
func newElasticStore(addr string, secret []byte) (launch.ElasticStore, error) {
	s, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: addr, Secret: secret})
	if err != nil {
		return nil, err
	}
	return storeAdapter{s}, nil
}

// storeAdapter fits *rendezvous.Server to launch.StoreServer.
type storeAdapter struct{ *rendezvous.Server }

func (a storeAdapter) Init(plan map[string]int) error {
	a.Server.Init(plan)
	return nil
}
