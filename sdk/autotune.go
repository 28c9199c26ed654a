package sdk

import (
	"os"
	"sync"
	"sync/atomic"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// HOROVOD_AUTOTUNE (sdk/internal/engine/autotune.go does the tuning): the
// global set's engine on global rank 0 runs the tuner; every engine of
// every rank shares the process's current settings (autotune.params), so
// the set rank 0 of any set publishes the tuned values and its members
// use them from the same round on.

// autotune is a World's autotuning state (zero when off).
type autotune struct {
	params atomic.Pointer[engine.Params]
	log    *os.File // HOROVOD_AUTOTUNE_LOG on global rank 0
}

// tuning returns what the engine of set id, on data plane data, gets:
// the shared settings, and the tuner for the global set on global rank 0.
func (w *World) tuning(id int, data backends.DataPlane) (*atomic.Pointer[engine.Params], *engine.Tuner) {
	k := w.knobs.autotune
	if !k.on {
		return nil, nil
	}
	if id != 0 || w.id.Rank != 0 {
		return &w.tune.params, nil
	}
	cfg := engine.TunerConfig{
		Start:     engine.Params{FusionThreshold: w.knobs.fusion, CycleTime: w.knobs.cycle},
		FixFusion: w.knobs.explicit["HOROVOD_FUSION_THRESHOLD"], FixCycle: w.knobs.explicit["HOROVOD_CYCLE_TIME"],
		Warmup: k.warmup, StepsPerSample: k.stepsPerSample, MaxSamples: k.maxSamples, Noise: k.noise,
		CacheEnabled: w.knobs.cache > 0, Logf: w.logf,
	}
	if h, ok := data.(backends.Hierarchical); ok {
		ar, ag := h.HierarchicalChoices()
		cfg.Start.HierAllreduce, cfg.Start.HierAllgather = h.HierarchicalState()
		cfg.TuneHierAllreduce = ar && !w.knobs.explicit["HOROVOD_HIERARCHICAL_ALLREDUCE"]
		cfg.TuneHierAllgather = ag && !w.knobs.explicit["HOROVOD_HIERARCHICAL_ALLGATHER"]
	}
	if k.log != "" {
		// The first world of the process truncates the log; a world after
		// an elastic reset (which tunes again) appends to it.
		flag := os.O_WRONLY | os.O_CREATE | os.O_APPEND
		_, again := tuneLogsOpened.LoadOrStore(k.log, true)
		if !again {
			flag |= os.O_TRUNC
		}
		f, err := os.OpenFile(k.log, flag, 0o644)
		if err != nil {
			w.logf("hvd: HOROVOD_AUTOTUNE_LOG: %v; autotuning goes on without its log", err)
		} else {
			w.tune.log, cfg.Log, cfg.LogContinues = f, f, again
		}
	}
	if adjustTuner != nil {
		adjustTuner(&cfg)
	}
	t := engine.NewTuner(cfg)
	p := t.Params()
	w.tune.params.Store(&p)
	return &w.tune.params, t
}

// adjustTuner lets a test start the tuner elsewhere (nil in use).
var adjustTuner func(*engine.TunerConfig)

var tuneLogsOpened sync.Map // HOROVOD_AUTOTUNE_LOG paths this process has written

// closeTuneLog closes the autotuning log (at shutdown).
func (w *World) closeTuneLog() {
	if w.tune.log != nil {
		if err := w.tune.log.Close(); err != nil {
			w.logf("hvd: closing HOROVOD_AUTOTUNE_LOG: %v", err)
		}
		w.tune.log = nil
	}
}
