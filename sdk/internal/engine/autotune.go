// autotune.go: HOROVOD_AUTOTUNE. The tuner runs in the global set's engine
// on global rank 0 and moves the fusion threshold and the cycle time (a
// Bayesian optimisation, bayes.go), then tries hierarchical allreduce and
// allgather on and off where the set spans hosts, and freezes the best.
//
// How a setting reaches every rank: each round's status vector ends with
// the sender's Params (paramWords), and every member of a set uses its set
// rank 0's for that round (Engine.adopt). The global set's engines store
// what they adopt in the process's shared Params, which is what the set
// rank 0 of any other set publishes; so a change made by the tuner between
// two rounds takes effect at the same round on every member of every set.
// The fusion threshold is always rank 0's (ranks configured differently
// would otherwise fuse their cached tensors differently); the cycle time is
// rank 0's only while a tuner publishes one, else each rank's own.
//
// How a setting is scored: as Horovod, from the global set's allreduce
// responses only. A sample ends when a tensor name has been seen
// StepsPerSample times since the sample began (a training step allreduces
// each gradient once), and scores the allreduced bytes per microsecond of
// wall time from the start of its first round to the start of the round
// that ended it; a trial is SamplesPerTrial samples, scored by their
// median. The first Warmup trials are discarded.

package engine

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Params are the settings the autotuner moves.
type Params struct {
	FusionThreshold              int64
	CycleTime                    time.Duration
	HierAllreduce, HierAllgather bool
	// Tuned: the settings come from a tuner (trying, or frozen at the
	// best), so every rank takes rank 0's cycle time too.
	Tuned bool
}

// paramWords is how many status-vector words carry Params.
const paramWords = 3

const (
	paramHierAllreduce = 1 << iota
	paramHierAllgather
	paramTuned
)

func (p Params) words() [paramWords]uint64 {
	var f uint64
	if p.HierAllreduce {
		f |= paramHierAllreduce
	}
	if p.HierAllgather {
		f |= paramHierAllgather
	}
	if p.Tuned {
		f |= paramTuned
	}
	return [paramWords]uint64{uint64(p.FusionThreshold), uint64(p.CycleTime), f}
}

func paramsFromWords(w []uint64) Params {
	return Params{FusionThreshold: int64(w[0]), CycleTime: time.Duration(w[1]),
		HierAllreduce: w[2]&paramHierAllreduce != 0, HierAllgather: w[2]&paramHierAllgather != 0,
		Tuned: w[2]&paramTuned != 0}
}

// The search box, as Horovod's, but from a cycle time of 0 (hvd's engine
// starts a round as soon as there is work; Horovod's loop always sleeps).
const (
	tuneMaxFusionMiB = 64
	tuneMaxCycleMs   = 100
)

// TunerConfig configures a Tuner; zero values take Horovod's defaults.
type TunerConfig struct {
	Start Params // the configured settings: the first trial, and what fixed knobs stay at
	// FixFusion, FixCycle: the knob was set explicitly, so it is not tuned
	// (Horovod's rule).
	FixFusion, FixCycle bool
	// TuneHierAllreduce, TuneHierAllgather: the global set spans hosts, its
	// data plane can switch (backends.Hierarchical), and the knob was not
	// set explicitly.
	TuneHierAllreduce, TuneHierAllgather bool
	Warmup                               int     // trials discarded first (HOROVOD_AUTOTUNE_WARMUP_SAMPLES, 3)
	StepsPerSample                       int     // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE (10)
	MaxSamples                           int     // Bayesian trials (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES, 20)
	Noise                                float64 // HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE (0.8)
	SamplesPerTrial                      int     // samples per trial, scored by their median (5)
	CacheEnabled                         bool    // for the log's cache_enabled column (not tuned)
	// Seeds are the first trials after the start: (fusion MiB, cycle ms).
	Seeds [][2]float64
	Log   io.Writer // the CSV log (HOROVOD_AUTOTUNE_LOG); nil: none
	// LogContinues: Log already has its header (an earlier tuner of the
	// process wrote it, before an elastic reset).
	LogContinues bool
	Logf         func(format string, args ...any)
}

// Tuner is the autotuner's state; it is used by one engine goroutine.
type Tuner struct {
	cfg    TunerConfig
	cur    Params
	active bool
	warmup int

	// the sample in progress
	sampleStart time.Time
	bytes       int64
	seen        map[string]int
	scores      []float64

	// the Bayesian phase: dims are the tuned variables (fusion, cycle)
	dims   []int
	bo     *bayesOpt
	iter   int
	x      []float64
	phase  int // 0 Bayesian, 1 hierarchical allreduce, 2 hierarchical allgather
	best   Params
	bestSc float64
	trials int
}

// DefaultSeeds are the first points tried after the configured settings.
var DefaultSeeds = [][2]float64{{4, 5}, {32, 25}, {16, 1}, {8, 10}}

// NewTuner starts tuning from cfg.Start.
func NewTuner(cfg TunerConfig) *Tuner {
	if cfg.StepsPerSample <= 0 {
		cfg.StepsPerSample = 10
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = 20
	}
	if cfg.SamplesPerTrial <= 0 {
		cfg.SamplesPerTrial = 5
	}
	if cfg.Warmup < 0 {
		cfg.Warmup = 0
	}
	if cfg.Seeds == nil {
		cfg.Seeds = DefaultSeeds
	}
	t := &Tuner{cfg: cfg, cur: cfg.Start, active: true, warmup: cfg.Warmup, seen: map[string]int{}, bestSc: -1}
	t.cur.Tuned = true
	if !cfg.FixFusion {
		t.dims = append(t.dims, 0)
	}
	if !cfg.FixCycle {
		t.dims = append(t.dims, 1)
	}
	t.x = t.toUnit(t.cur)
	t.cur = t.fromUnit(t.x) // clamp the start into the box
	if len(t.dims) > 0 {
		t.bo = newBayesOpt(len(t.dims), cfg.Noise, 1)
	} else {
		t.phase = 1
		t.skipFixedPhases()
	}
	if cfg.Log != nil && !cfg.LogContinues {
		fmt.Fprintln(cfg.Log, "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,tensor_fusion_threshold,score")
	}
	if !t.active {
		t.finish()
	}
	return t
}

// Params are the settings in force (the trial's while tuning, then the best).
func (t *Tuner) Params() Params { return t.cur }

// Active says whether the tuner still tries settings.
func (t *Tuner) Active() bool { return t.active }

// Trials counts the scored trials (warm-up excluded).
func (t *Tuner) Trials() int { return t.trials }

func (t *Tuner) toUnit(p Params) []float64 {
	x := make([]float64, len(t.dims))
	for i, d := range t.dims {
		if d == 0 {
			x[i] = float64(p.FusionThreshold) / (tuneMaxFusionMiB << 20)
		} else {
			x[i] = p.CycleTime.Seconds() * 1000 / tuneMaxCycleMs
		}
		x[i] = min(1, max(0, x[i]))
	}
	return x
}

func (t *Tuner) fromUnit(x []float64) Params {
	p := t.cur
	for i, d := range t.dims {
		if d == 0 {
			p.FusionThreshold = int64(math.Round(x[i] * (tuneMaxFusionMiB << 20)))
		} else {
			p.CycleTime = time.Duration(math.Round(x[i] * tuneMaxCycleMs * float64(time.Millisecond)))
		}
	}
	return p
}

// Observe feeds the tuner one round of the global set: the responses it
// executed and when the round started. It returns the settings for the
// next round and whether they changed.
func (t *Tuner) Observe(list []Response, roundStart time.Time) (Params, bool) {
	if !t.active {
		return t.cur, false
	}
	var names []string
	var bytes int64
	for i := range list {
		r := &list[i]
		if r.Type != Allreduce {
			continue
		}
		names = append(names, r.Names...)
		for _, c := range r.Counts {
			bytes += c * int64(r.DType.Size())
		}
	}
	if len(names) == 0 {
		return t.cur, false
	}
	if t.sampleStart.IsZero() {
		t.sampleStart = roundStart
	}
	for _, n := range names {
		if t.seen[n]++; t.seen[n] > t.cfg.StepsPerSample {
			us := float64(roundStart.Sub(t.sampleStart)) / float64(time.Microsecond)
			t.scores = append(t.scores, float64(t.bytes)/max(us, 1))
			clear(t.seen)
			for _, m := range names {
				t.seen[m]++
			}
			t.bytes, t.sampleStart = 0, roundStart
			break
		}
	}
	t.bytes += bytes
	if len(t.scores) < t.cfg.SamplesPerTrial {
		return t.cur, false
	}
	slices.Sort(t.scores)
	score := t.scores[len(t.scores)/2]
	t.scores = t.scores[:0]
	clear(t.seen)
	t.bytes, t.sampleStart = 0, time.Time{}
	if t.warmup > 0 {
		t.warmup--
		return t.cur, false
	}
	t.tune(score)
	return t.cur, true
}

// tune records a trial's score and moves to the next setting.
func (t *Tuner) tune(score float64) {
	t.trials++
	t.logRow(t.cur, score)
	if score > t.bestSc {
		t.best, t.bestSc = t.cur, score
	}
	switch t.phase {
	case 0:
		t.bo.add(t.x, score)
		t.iter++
		if t.iter < t.cfg.MaxSamples {
			if k := t.iter - 1; k < len(t.cfg.Seeds) {
				s := Params{FusionThreshold: int64(t.cfg.Seeds[k][0] * (1 << 20)),
					CycleTime: time.Duration(t.cfg.Seeds[k][1] * float64(time.Millisecond))}
				t.x = t.toUnit(s)
			} else {
				t.x = t.bo.next()
			}
			t.cur = t.fromUnit(t.x)
			return
		}
		t.phase = 1
		t.cur = t.best
		t.cur.Tuned = true
		t.skipFixedPhases()
	case 1, 2:
		t.cur = t.best
		t.cur.Tuned = true
		t.phase++
		t.skipFixedPhases()
	}
	if !t.active {
		t.finish()
	}
}

// skipFixedPhases enters the next categorical phase that is tuned (setting
// the value to try), or ends tuning.
func (t *Tuner) skipFixedPhases() {
	for {
		switch {
		case t.phase == 1 && t.cfg.TuneHierAllreduce:
			t.cur.HierAllreduce = !t.best.HierAllreduce
			return
		case t.phase == 2 && t.cfg.TuneHierAllgather:
			t.cur.HierAllgather = !t.best.HierAllgather
			return
		case t.phase >= 3:
			t.active = false
			return
		}
		t.phase++
	}
}

// finish freezes the best setting and logs it (the CSV's last row).
func (t *Tuner) finish() {
	if t.bestSc < 0 { // nothing scored: keep the start
		t.best = t.cfg.Start
	}
	t.cur = t.best
	if t.bestSc >= 0 {
		t.logRow(t.cur, t.bestSc)
	}
	if t.cfg.Logf != nil {
		t.cfg.Logf("autotune: done after %d trials: fusion threshold %d bytes, cycle time %v, hierarchical allreduce %v, allgather %v (%.1f bytes/µs)",
			t.trials, t.cur.FusionThreshold, t.cur.CycleTime, t.cur.HierAllreduce, t.cur.HierAllgather, max(t.bestSc, 0))
	}
}

func (t *Tuner) logRow(p Params, score float64) {
	if t.cfg.Log == nil {
		return
	}
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	fmt.Fprintf(t.cfg.Log, "%d,%d,0,%d,%g,%g,%g\n", b(p.HierAllreduce), b(p.HierAllgather), b(t.cfg.CacheEnabled),
		p.CycleTime.Seconds()*1000, float64(p.FusionThreshold)/(1<<20), score)
}
