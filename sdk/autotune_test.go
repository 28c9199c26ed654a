package sdk

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// tuneRows reads the autotuning CSV (without its header).
func tuneRows(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !strings.HasPrefix(lines[0], "hierarchical_allreduce,") {
		t.Fatalf("no header: %q", b)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, strings.Split(l, ","))
	}
	return rows
}

// autotuneSteps runs training-like steps on every rank until rank 0's log
// has want rows: 128 float32 gradients of 4 KiB allreduced together, then a
// done flag (rank 0 raises it), every result checked. It returns the steps.
func autotuneSteps(t *testing.T, ws []*World, log string, want int) int {
	t.Helper()
	const k, elems = 128, 1024
	steps := make([]int, len(ws))
	each(t, ws, func(w *World) error {
		ps := w.GlobalProcessSet()
		n := float32(ps.Size())
		for step := 0; step < 5000; step++ {
			hs := make([]*Handle, k)
			for i := range hs {
				x := make([]float32, elems)
				x[0], x[elems-1] = float32(w.Rank()), float32(step)
				var err error
				if hs[i], err = ps.AllreduceAsync(TensorOf(x), ReduceOptions{Op: Sum, Name: fmt.Sprintf("grad.%d", i)}); err != nil {
					return err
				}
			}
			for i, h := range hs {
				out, err := h.Wait()
				if err != nil {
					return err
				}
				if y := SliceOf[float32](out); y[0] != n*(n-1)/2 || y[elems-1] != n*float32(step) {
					return fmt.Errorf("step %d grad.%d: %v … %v", step, i, y[0], y[elems-1])
				}
			}
			flag := float32(0)
			if w.Rank() == 0 {
				if b, _ := os.ReadFile(log); strings.Count(string(b), "\n") >= want+1 {
					flag = 1
				}
			}
			out, err := ps.Allreduce(TensorOf([]float32{flag}), ReduceOptions{Op: Max, Name: "done"})
			if err != nil {
				return err
			}
			if SliceOf[float32](out)[0] == 1 {
				steps[w.Rank()] = step + 1
				return nil
			}
		}
		return fmt.Errorf("rank %d: the log never got %d rows", w.Rank(), want)
	})
	return steps[0]
}

// HOROVOD_AUTOTUNE with real engines (np 3, TCP: a small allreduce costs
// tens of µs there, so fusing 128 of them matters; on shared memory it
// hardly does), from a bad start: a 16 KiB fusion threshold and a 40 ms
// cycle time, with seeds that all pace at ≥ 20 ms. The workload's best is
// known: no pacing (a step takes a few ms) and one fused allreduce. The tuner must end within it,
// every rank must run rank 0's settings (their results are checked every
// step, so ranks fusing differently would fail), and a process set that
// excludes rank 0 — whose own set rank 0 is global rank 1 — must run them
// too.
func TestAutotuneConvergesWithRealEngines(t *testing.T) {
	adjustTuner = func(c *engine.TunerConfig) {
		c.Start.FusionThreshold, c.Start.CycleTime = 16<<10, 40*time.Millisecond
		c.Seeds = [][2]float64{{1.0 / 32, 20}, {48, 70}, {0.25, 30}, {0.5, 90}}
	}
	t.Cleanup(func() { adjustTuner = nil })
	log := t.TempDir() + "/autotune.csv"
	const trials = 10
	ws := mustWorlds(t, 3, worldOpts{
		sets: func(int) [][]int { return [][]int{{1, 2}} },
		env: map[string]string{"HVD_BACKEND": "tcp", "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
			"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "3", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": strconv.Itoa(trials)}})
	steps := autotuneSteps(t, ws, log, trials+1)
	rows := tuneRows(t, log)
	best := rows[len(rows)-1]
	t.Logf("%d steps; trials:\n%v", steps, rows)
	cycle, _ := strconv.ParseFloat(best[4], 64)
	mib, _ := strconv.ParseFloat(best[5], 64)
	if cycle > 5 || mib < 0.25 {
		t.Fatalf("froze at a %g ms cycle time and a %g MiB threshold; want ≤ 5 ms and ≥ 0.25 MiB (at most 2 allreduces a step)", cycle, mib)
	}
	for i, r := range rows[:5] {
		if c, _ := strconv.ParseFloat(r[4], 64); c < 20 {
			t.Fatalf("trial %d (%v) is not one of the bad starting points", i, r)
		}
	}
	// Every rank's global engine and the {1,2} set's engine run the frozen settings.
	set := func(w *World) *ProcessSet {
		for _, ps := range w.ProcessSets() {
			if ps.Size() == 2 {
				return ps
			}
		}
		return nil
	}
	each(t, ws, func(w *World) error {
		for _, ps := range []*ProcessSet{w.GlobalProcessSet(), set(w)} {
			if !ps.Included() {
				continue
			}
			if _, err := ps.Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "after"}); err != nil {
				return err
			}
			p, ok := ps.eng.InForce()
			if !ok || !p.Tuned || strconv.FormatFloat(p.CycleTime.Seconds()*1000, 'g', -1, 64) != best[4] ||
				strconv.FormatFloat(float64(p.FusionThreshold)/(1<<20), 'g', -1, 64) != best[5] {
				return fmt.Errorf("set %v runs %+v, not the frozen %v", ps.Ranks(), p, best)
			}
		}
		return nil
	})
}

// A global set spanning two hosts (np 4, two per host): after the search,
// the tuner tries hierarchical allreduce and then allgather the other way
// (both are on by default here), every rank switching at the same round —
// the results, checked every step, would be wrong or hang otherwise — and
// every rank ends on the setting of the log's last row. With
// HOROVOD_HIERARCHICAL_ALLGATHER set explicitly, allgather is not tried.
func TestAutotuneHierarchicalAcrossHosts(t *testing.T) {
	log := t.TempDir() + "/autotune.csv"
	ws := mustWorlds(t, 4, worldOpts{
		hostKey: func(r int) string { return fmt.Sprint("host", r/2) },
		env: map[string]string{"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
			"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "2",
			"HOROVOD_HIERARCHICAL_ALLGATHER": "1"}})
	autotuneSteps(t, ws, log, 4)
	rows := tuneRows(t, log)
	if len(rows) != 4 {
		t.Fatalf("want 2 searched trials, one with hierarchical allreduce off, and the best: %v", rows)
	}
	for i, r := range rows {
		if wantAR := i != 2; (r[0] == "1") != wantAR && i < 3 || r[1] != "1" {
			t.Fatalf("row %d: %v (all rows %v)", i, r, rows)
		}
	}
	best := rows[3]
	each(t, ws, func(w *World) error {
		ps := w.GlobalProcessSet()
		if _, err := ps.Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "after"}); err != nil {
			return err
		}
		p, _ := ps.eng.InForce()
		if (best[0] == "1") != p.HierAllreduce || !p.HierAllgather {
			return fmt.Errorf("runs %+v, not the frozen %v", p, best)
		}
		return nil
	})
}
