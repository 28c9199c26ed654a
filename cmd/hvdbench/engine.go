package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk"
)

// runEngine measures the Horovod engine against the raw communicator:
//
//	hvdrun -np 2 hvdbench engine [--dynamic-sets 3] [--json f]
//
// rows: a named 8-byte allreduce through the engine vs. the raw op; 200
// tensors of 4 KiB enqueued asynchronously then waited vs. one raw 800 KiB
// allreduce. Run it with HOROVOD_FUSION_THRESHOLD=0 for the unfused batch.
// --dynamic-sets N registers N extra dynamic process sets first (the
// engine's cost for sets that did not change should not move).
func runEngine(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("hvdbench engine", flag.ContinueOnError)
	dyn := fs.Int("dynamic-sets", 0, "extra dynamic process sets to register before measuring")
	jsonPath := fs.String("json", "", "write rows as JSON")
	samples := fs.Int("samples", 15, "samples per row")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := sdk.Init(sdk.Config{Dynamic: *dyn > 0}); err != nil {
		return err
	}
	defer sdk.Shutdown()
	w, _ := sdk.Current()
	g := w.GlobalProcessSet()
	for i := 0; i < *dyn; i++ {
		// Singletons first, then neighbouring pairs: distinct, and none is
		// the global set (np=2 has only two such sets).
		ranks := []int{i % w.Size()}
		if i >= w.Size() {
			ranks = append(ranks, (i+1)%w.Size())
		}
		if _, err := w.AddProcessSet(ranks); err != nil {
			return err
		}
	}
	raw := g.Communicator()
	out := io.Discard
	if w.Rank() == 0 {
		out = stdout
		fmt.Fprintf(out, "# hvdbench engine  np=%d  fusion threshold=%s  dynamic sets=%d\n", w.Size(), envOr("HOROVOD_FUSION_THRESHOLD", "134217728"), *dyn)
		fmt.Fprintf(out, "# %-34s %12s %12s %12s %10s %8s %8s\n", "row", "time (us)", "min", "max", "cpu us/op", "csw/op", "caller")
	}
	var profile []Row // rows with the engine's per-op profile, printed at the end
	measure := func(name string, k int, f func() error) (Row, error) {
		for i := 0; i < 3; i++ {
			if err := f(); err != nil {
				return Row{}, err
			}
		}
		times := make([]float64, *samples)
		ru0, st0 := rusage(), g.Stats()
		for s := range times {
			if err := raw.Barrier(); err != nil {
				return Row{}, err
			}
			t0 := time.Now()
			for i := 0; i < k; i++ {
				if err := f(); err != nil {
					return Row{}, err
				}
			}
			times[s] = float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(k)
		}
		ru1, st1 := rusage(), g.Stats()
		if err := raw.Allreduce(sdk.TensorOf(times).Data, backends.Float64, backends.Max); err != nil {
			return Row{}, err
		}
		slices.Sort(times)
		nops := float64(k * *samples)
		r := Row{Op: name, TimeUS: times[len(times)/2], TimeMin: times[0], TimeMax: times[len(times)-1],
			System: "hvd-engine", NP: w.Size(), DType: "float32", Iters: k, Samples: *samples, Backend: envOr("HOROVOD_CPU_OPERATIONS", "default"),
			CPUUS: (ru1.cpu - ru0.cpu) / nops, CtxSwitches: float64(ru1.csw-ru0.csw) / nops}
		if rounds := st1.Rounds - st0.Rounds; rounds > 0 {
			r.CallerShare = float64(st1.CallerRounds-st0.CallerRounds) / float64(rounds)
		}
		us := func(a, b time.Duration) float64 { return float64((b - a).Nanoseconds()) / 1e3 / nops }
		r.PickupUS, r.StatusUS = us(st0.Pickup, st1.Pickup), us(st0.Status, st1.Status)
		r.NegotiateUS, r.ExecuteUS = us(st0.Negotiate, st1.Negotiate), us(st0.Execute, st1.Execute)
		r.RoundsPerOp = float64(st1.Rounds-st0.Rounds) / nops
		r.NegotiationsPerOp = float64(st1.Negotiations-st0.Negotiations) / nops
		profile = append(profile, r)
		fmt.Fprintf(out, "  %-34s %12.2f %12.2f %12.2f %10.2f %8.2f %8.2f\n", name, r.TimeUS, r.TimeMin, r.TimeMax, r.CPUUS, r.CtxSwitches, r.CallerShare)
		return r, nil
	}
	var rows []Row
	defer func() {
		fmt.Fprintf(out, "# per op, µs: %-24s %9s %9s %9s %9s %9s %7s %7s\n", "row", "total", "pickup", "status", "negotiate", "execute", "rounds", "negot.")
		for _, r := range profile {
			fmt.Fprintf(out, "#   %-34s %9.2f %9.2f %9.2f %9.2f %9.2f %7.2f %7.2f\n", r.Op, r.TimeUS, r.PickupUS, r.StatusUS, r.NegotiateUS, r.ExecuteUS,
				r.RoundsPerOp, r.NegotiationsPerOp)
		}
	}()
	add := func(r Row, err error) error {
		if err == nil {
			rows = append(rows, r)
		}
		return err
	}
	small := make([]float32, 2)
	if err := add(measure("raw allreduce 8 B", 200, func() error { return raw.Allreduce(sdk.TensorOf(small).Data, backends.Float32, backends.Sum) })); err != nil {
		return err
	}
	if err := add(measure("engine allreduce 8 B (named)", 200, func() error {
		return g.AllreduceInPlace(sdk.TensorOf(small), sdk.ReduceOptions{Op: sdk.Sum, Name: "lat"})
	})); err != nil {
		return err
	}
	big := make([]float32, 200*1024)
	if err := add(measure("raw allreduce 800 KiB", 20, func() error { return raw.Allreduce(sdk.TensorOf(big).Data, backends.Float32, backends.Sum) })); err != nil {
		return err
	}
	tensors := make([][]float32, 200)
	for i := range tensors {
		tensors[i] = make([]float32, 1024)
	}
	names := make([]string, len(tensors))
	for i := range names {
		names[i] = fmt.Sprint("grad.", i)
	}
	hs := make([]*sdk.Handle, len(tensors))
	if err := add(measure("engine 200 x 4 KiB async batch", 5, func() error {
		for i, t := range tensors {
			h, err := g.AllreduceInPlaceAsync(sdk.TensorOf(t), sdk.ReduceOptions{Op: sdk.Sum, Name: names[i]})
			if err != nil {
				return err
			}
			hs[i] = h
		}
		for _, h := range hs {
			if _, err := h.Wait(); err != nil {
				return err
			}
		}
		return nil
	})); err != nil {
		return err
	}
	if *jsonPath != "" && w.Rank() == 0 {
		return writeJSON(*jsonPath, rows)
	}
	return nil
}

type usage struct {
	cpu float64 // µs of user+system time
	csw int64   // voluntary+involuntary context switches
}

// rusage is this process's resource usage so far (every thread).
func rusage() usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return usage{}
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec)*1e6 + float64(t.Usec) }
	return usage{cpu: tv(ru.Utime) + tv(ru.Stime), csw: ru.Nvcsw + ru.Nivcsw}
}
