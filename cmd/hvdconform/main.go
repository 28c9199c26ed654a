// Command hvdconform runs the backend conformance suite with ranks as real
// processes (normally under hvdrun), on the global process set and on a
// process set that excludes rank 0 when there are at least three ranks:
//
//	hvdrun -np 3 hvdconform [-quick]
//
// It prints "N passed, N failed" per rank and exits non-zero on any failure.
//
// `hvdconform fault` is the fault-injection worker used by the end-to-end
// tests: every rank writes its pid to $HVD_TEST_PIDDIR/<rank>, then
// allreduces 64 MiB in a loop until an error, which it prints (with the
// time since the last successful op) before exiting 3. It ignores SIGTERM so
// that the test sees the survivors' own error reports; hvdrun still reaps
// them with SIGKILL after its grace period.
package main

import (
	"errors"
	"flag"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
	"github.com/hvdorg/hvd/sdk"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fault" {
		os.Exit(fault())
	}
	if len(os.Args) > 1 && os.Args[1] == "engine" {
		os.Exit(engineScenarios())
	}
	if len(os.Args) > 1 && os.Args[1] == "reinit" {
		os.Exit(reinit())
	}
	quick := flag.Bool("quick", false, "small element counts only (0, 1, 7, 1001)")
	flag.Parse()
	code := conform(*quick)
	sdk.FinalizeMPI() // the MPI build's data plane (a no-op otherwise)
	os.Exit(code)
}

func size() int {
	n, _ := strconv.Atoi(os.Getenv("HOROVOD_SIZE"))
	return max(n, 1)
}

func conform(quick bool) int {
	n := size()
	var sets [][]int
	if n >= 3 {
		var rest []int
		for r := 1; r < n; r++ {
			rest = append(rest, r)
		}
		sets = append(sets, rest)
	}
	if err := sdk.Init(sdk.Config{ProcessSets: sets}); err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	defer sdk.Shutdown()
	w, _ := sdk.Current()
	fmt.Printf("rank %d/%d: local %d/%d cross %d/%d homogeneous %v\n", w.Rank(), w.Size(), w.LocalRank(), w.LocalSize(), w.CrossRank(), w.CrossSize(), w.IsHomogeneous())
	var cpus unix.CPUSet
	if unix.SchedGetaffinity(0, &cpus) == nil {
		var list []int
		for c := 0; len(list) < cpus.Count(); c++ {
			if cpus.IsSet(c) {
				list = append(list, c)
			}
		}
		fmt.Printf("rank %d: cpus %v\n", w.Rank(), list)
	}
	fmt.Printf("rank %d: gomaxprocs %d\n", w.Rank(), runtime.GOMAXPROCS(0))
	o := conformance.Options{}
	if quick {
		o.Counts = []int{0, 1, 7, 1001}
	}
	passed, failed := 0, 0
	for _, ps := range w.ProcessSets() {
		if !ps.Included() {
			continue
		}
		so := o
		if _, ok := ps.Communicator().(backends.ControlPlane); !ok {
			// A data plane without a control plane of its own (MPI, NCCL):
			// the set's control messages go over its host plane instead.
			so.NoControl = true
		}
		total := len(conformance.Cases(ps.Size(), so))
		err := conformance.RunWorker(ps.Communicator(), so, nil)
		var errs []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		} else if err != nil {
			errs = []error{err}
		}
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "%v: FAIL %v\n", ps, e)
		}
		failed += len(errs)
		passed += total - len(errs)
		fmt.Printf("%v: %d cases, %d failed, on %T\n", ps, total, len(errs), ps.Communicator())
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

func fault() int {
	signal.Ignore(syscall.SIGTERM)
	if err := sdk.Init(sdk.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	w, _ := sdk.Current()
	if dir := os.Getenv("HVD_TEST_PIDDIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, strconv.Itoa(w.Rank())), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	buf := make([]float32, 16<<20)
	g := w.GlobalProcessSet()
	last := time.Now()
	for i := 0; ; i++ {
		err := g.AllreduceInPlace(sdk.TensorOf(buf), sdk.ReduceOptions{Op: sdk.Sum})
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAULT after %d ops, %v after the last good op (peer failure: %v): %v\n",
				i, time.Since(last).Round(time.Millisecond), errors.Is(err, backends.ErrPeerFailure), err)
			return 3
		}
		last = time.Now()
		if i == 2 {
			fmt.Println("running") // the test kills a rank once every rank got here
		}
	}
}

// reinit: Init, allreduce, Shutdown, three times in the same processes
// (elastic resets do this): every round must rendezvous afresh.
func reinit() int {
	for round := 0; round < 3; round++ {
		if err := sdk.Init(sdk.Config{}); err != nil {
			fmt.Fprintf(os.Stderr, "round %d: init: %v\n", round, err)
			return 1
		}
		w, _ := sdk.Current()
		v := []float32{float32(w.Rank() + 1)}
		if err := w.GlobalProcessSet().AllreduceInPlace(sdk.TensorOf(v), sdk.ReduceOptions{Op: sdk.Sum}); err != nil {
			fmt.Fprintf(os.Stderr, "round %d: allreduce: %v\n", round, err)
			return 1
		}
		n := float32(w.Size())
		if v[0] != n*(n+1)/2 {
			fmt.Fprintf(os.Stderr, "round %d: got %v\n", round, v[0])
			return 1
		}
		sdk.Shutdown()
		fmt.Printf("round %d ok\n", round)
	}
	return 0
}
