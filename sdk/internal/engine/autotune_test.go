package engine

import (
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// stepModel is a synthetic training step whose best settings are known:
// k float32 gradients of size bytes each are allreduced together after
// compute; each allreduce costs perOp plus its bytes at bw bytes/µs, and a
// round starts no sooner than the cycle time after the previous one.
type stepModel struct {
	k, size        int64
	compute, perOp time.Duration
	bw             float64 // bytes per µs
	hierGain       float64 // step time factor with hierarchical allreduce on (1: none)
	noise          float64 // relative, uniform
	rng            *rand.Rand
}

func (m *stepModel) ops(p Params) int64 {
	if p.FusionThreshold < m.size {
		return m.k
	}
	per := p.FusionThreshold / m.size
	return (m.k + per - 1) / per
}

func (m *stepModel) stepTime(p Params) time.Duration {
	n := m.ops(p)
	comm := time.Duration(n)*m.perOp + time.Duration(float64(m.k*m.size)/m.bw*float64(time.Microsecond))
	d := max(p.CycleTime, m.compute+comm)
	if p.HierAllreduce {
		d = time.Duration(float64(d) * m.hierGain)
	}
	return time.Duration(float64(d) * (1 + m.noise*(2*m.rng.Float64()-1)))
}

// responses is one step's execution list under p: the k tensors fused up
// to the threshold.
func (m *stepModel) responses(p Params) []Response {
	var out []Response
	per := max(p.FusionThreshold/m.size, 1)
	for i := int64(0); i < m.k; i += per {
		r := Response{Type: Allreduce, DType: backends.Float32}
		for j := i; j < min(i+per, m.k); j++ {
			r.Names = append(r.Names, fmt.Sprintf("grad.%d", j))
			r.Counts = append(r.Counts, m.size/4)
		}
		out = append(out, r)
	}
	return out
}

// drive runs the model through the tuner on a simulated clock until it
// freezes (or maxSteps), and returns the steps taken.
func drive(t *testing.T, tu *Tuner, m *stepModel, maxSteps int) int {
	t.Helper()
	now := time.Unix(1000, 0)
	for step := 1; step <= maxSteps; step++ {
		p := tu.Params()
		now = now.Add(m.stepTime(p))
		tu.Observe(m.responses(p), now)
		if !tu.Active() {
			return step
		}
	}
	t.Fatalf("the tuner did not freeze in %d steps (%d trials)", maxSteps, tu.Trials())
	return 0
}

func readLog(t *testing.T, s string) [][]string {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	if err != nil {
		t.Fatalf("the log is no CSV: %v\n%s", err, s)
	}
	want := "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,tensor_fusion_threshold,score"
	if len(rows) == 0 || strings.Join(rows[0], ",") != want {
		t.Fatalf("header %v", rows)
	}
	return rows[1:]
}

func col(t *testing.T, row []string, i int) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(row[i], 64)
	if err != nil {
		t.Fatalf("row %v: %v", row, err)
	}
	return f
}

// The tuner finds the known best region of a synthetic workload from a bad
// start and bad seeds: everything fused (threshold ≥ 1 MiB, one allreduce
// of 256 gradients) and no pacing (cycle time under the 2.4 ms the step
// needs anyway). Only the Bayesian search can get there: the start and the
// seeds all pace at ≥ 20 ms or fuse little.
func TestTunerConvergesOnKnownBest(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			m := &stepModel{k: 256, size: 4 << 10, compute: 2 * time.Millisecond, perOp: 40 * time.Microsecond,
				bw: 2000, hierGain: 1, noise: 0.05, rng: rand.New(rand.NewPCG(seed, 7))}
			var log strings.Builder
			tu := NewTuner(TunerConfig{
				Start:  Params{FusionThreshold: 64 << 10, CycleTime: 30 * time.Millisecond},
				Seeds:  [][2]float64{{0.125, 20}, {40, 60}, {2, 90}, {0.5, 45}},
				Warmup: 1, StepsPerSample: 3, SamplesPerTrial: 3, MaxSamples: 20, Noise: 0.8, Log: &log, CacheEnabled: true,
			})
			drive(t, tu, m, 100000)
			best := tu.Params()
			if tu.Trials() != 20 || !best.Tuned {
				t.Fatalf("trials %d, %+v", tu.Trials(), best)
			}
			if best.FusionThreshold < 1<<20 || best.CycleTime > 2400*time.Microsecond {
				t.Fatalf("froze at threshold %d, cycle %v; want ≥ 1 MiB and ≤ 2.4 ms\n%s", best.FusionThreshold, best.CycleTime, log.String())
			}
			rows := readLog(t, log.String())
			if len(rows) != 21 {
				t.Fatalf("%d rows, want 20 trials and the best", len(rows))
			}
			last, top := rows[20], 0.0
			for i, r := range rows[:20] {
				if len(r) != 7 || r[2] != "0" || r[3] != "1" {
					t.Fatalf("row %d %v", i, r)
				}
				top = max(top, col(t, r, 6))
				if i < 5 && col(t, r, 4) < 20 && col(t, r, 5) >= 1 {
					t.Fatalf("trial %d is already in the best region: the test no longer needs the search", i)
				}
			}
			if col(t, last, 6) != top || col(t, last, 4) != best.CycleTime.Seconds()*1000 ||
				col(t, last, 5) != float64(best.FusionThreshold)/(1<<20) {
				t.Fatalf("the last row %v is not the best (%g) or not the frozen setting %+v", last, top, best)
			}
		})
	}
}

// A sample's score is the allreduced bytes per µs of wall time from its
// first round's start to the start of the round that ends it.
func TestTunerScoresBytesPerMicrosecond(t *testing.T) {
	var log strings.Builder
	tu := NewTuner(TunerConfig{Start: Params{FusionThreshold: 1 << 20}, StepsPerSample: 2, SamplesPerTrial: 1,
		MaxSamples: 2, Seeds: [][2]float64{{8, 0}}, Log: &log})
	list := []Response{{Type: Allreduce, DType: backends.Float64, Names: []string{"a", "b"}, Counts: []int64{100, 25}},
		{Type: Broadcast, DType: backends.Float64, Names: []string{"c"}, Counts: []int64{1000}}}
	t0 := time.Unix(0, 0)
	for i, at := range []time.Duration{0, 400 * time.Microsecond, 1000 * time.Microsecond} {
		p, changed := tu.Observe(list, t0.Add(at))
		if changed != (i == 2) {
			t.Fatalf("round %d: changed %v", i, changed)
		}
		if i == 2 && p.FusionThreshold != 8<<20 {
			t.Fatalf("the next trial is %+v, want the seed", p)
		}
	}
	rows := readLog(t, log.String())
	// two rounds of 1000 bytes of allreduce (the broadcast does not count) in 1000 µs
	if len(rows) != 1 || col(t, rows[0], 6) != 2 || col(t, rows[0], 5) != 1 || col(t, rows[0], 4) != 0 {
		t.Fatalf("%v", rows)
	}
}

// Knobs set explicitly stay where they are; warm-up trials are not logged.
func TestTunerFixedKnobsAndWarmup(t *testing.T) {
	m := &stepModel{k: 64, size: 16 << 10, compute: time.Millisecond, perOp: 30 * time.Microsecond, bw: 2000,
		hierGain: 1, rng: rand.New(rand.NewPCG(1, 2))}
	var log strings.Builder
	tu := NewTuner(TunerConfig{Start: Params{FusionThreshold: 32 << 10, CycleTime: 500 * time.Microsecond}, FixCycle: true,
		Warmup: 2, StepsPerSample: 2, SamplesPerTrial: 3, MaxSamples: 8, Log: &log})
	drive(t, tu, m, 10000)
	rows := readLog(t, log.String())
	if len(rows) != 9 {
		t.Fatalf("%d rows: want 8 trials (2 warm-up trials unlogged) and the best", len(rows))
	}
	thresholds := map[float64]bool{}
	for _, r := range rows {
		if col(t, r, 4) != 0.5 {
			t.Fatalf("the fixed cycle time moved: %v", r)
		}
		thresholds[col(t, r, 5)] = true
	}
	if len(thresholds) < 5 || tu.Params().FusionThreshold < 1<<20 {
		t.Fatalf("the threshold was not searched (%v) or not found (%+v)", thresholds, tu.Params())
	}
	both := NewTuner(TunerConfig{Start: Params{FusionThreshold: 5, CycleTime: 7}, FixFusion: true, FixCycle: true})
	if both.Active() || both.Params().FusionThreshold != 5 || both.Params().CycleTime != 7 {
		t.Fatalf("nothing to tune: %+v active %v", both.Params(), both.Active())
	}
}

// After the search, hierarchical allreduce and allgather are tried the
// other way; the better is kept.
func TestTunerHierarchical(t *testing.T) {
	m := &stepModel{k: 16, size: 64 << 10, compute: time.Millisecond, perOp: 30 * time.Microsecond, bw: 2000,
		hierGain: 0.5, rng: rand.New(rand.NewPCG(3, 4))}
	var log strings.Builder
	tu := NewTuner(TunerConfig{Start: Params{FusionThreshold: 8 << 20}, TuneHierAllreduce: true, TuneHierAllgather: true,
		StepsPerSample: 2, SamplesPerTrial: 1, MaxSamples: 3, Log: &log})
	drive(t, tu, m, 10000)
	rows := readLog(t, log.String())
	if len(rows) != 6 || rows[3][0] != "1" || rows[3][1] != "0" || rows[4][0] != "1" || rows[4][1] != "1" {
		t.Fatalf("want 3 searched trials, hier allreduce on, then allgather on too, then the best:\n%s", log.String())
	}
	if p := tu.Params(); !p.HierAllreduce || p.HierAllgather && col(t, rows[4], 6) <= col(t, rows[3], 6) {
		t.Fatalf("%+v\n%s", p, log.String())
	}
	if math.IsNaN(col(t, rows[5], 6)) {
		t.Fatal(log.String())
	}
}
