package sdk

import (
	"context"
	"os"
	"sync"
)

// The process-wide World, as Horovod's hvd.init()/hvd.shutdown() manage it.
var (
	globalMu sync.Mutex
	current  *World
	// elasticWorker is this process's elastic Worker (HOROVOD_ELASTIC=1):
	// it outlives Shutdown, so the next Init joins the next world.
	elasticWorker *Worker
)

// inits counts successful Inits in this process (Config.Generation).
var inits int

// Init joins the job as the process-wide World (see Start). Calling Init
// again while initialised is harmless and changes nothing (new process sets
// are not registered, as in Horovod); Init after Shutdown starts a new World
// (elastic resets rely on it).
//
// In an elastic worker (HOROVOD_ELASTIC=1, started by hvdrun's elastic
// driver) Init joins the next world the driver assigns (Worker.Init); the
// first Init's process sets and dynamic mode hold for every later world,
// whatever later calls pass.
func Init(cfg Config) error {
	globalMu.Lock()
	defer globalMu.Unlock()
	if current != nil {
		return nil
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	if elasticWorker != nil || IsElastic(getenv) {
		if elasticWorker == nil {
			wk, err := NewWorker(cfg)
			if err != nil {
				return err
			}
			elasticWorker = wk
		}
		w, err := elasticWorker.Init(context.Background())
		if err != nil {
			return err
		}
		current = w
		return nil
	}
	if cfg.Generation == 0 {
		cfg.Generation = inits
	}
	w, err := Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	inits++
	current = w
	return nil
}

// Shutdown leaves the job; handles from the old World return
// ErrNotInitialized afterwards. Shutdown without Init is a no-op.
func Shutdown() error {
	globalMu.Lock()
	defer globalMu.Unlock()
	if current == nil {
		return nil
	}
	err := current.Close()
	current = nil
	return err
}

// IsInitialized reports whether Init has succeeded and Shutdown has not run.
func IsInitialized() bool {
	globalMu.Lock()
	defer globalMu.Unlock()
	return current != nil
}

// Current returns the process-wide World, or ErrNotInitialized.
func Current() (*World, error) {
	globalMu.Lock()
	defer globalMu.Unlock()
	if current == nil {
		return nil, ErrNotInitialized
	}
	return current, nil
}

// GlobalProcessSet returns the process-wide World's global set, or
// ErrNotInitialized.
func GlobalProcessSet() (*ProcessSet, error) {
	w, err := Current()
	if err != nil {
		return nil, err
	}
	return w.GlobalProcessSet(), nil
}

// ElasticWorker returns this process's elastic Worker (nil unless Init ran
// in an elastic worker).
func ElasticWorker() *Worker {
	globalMu.Lock()
	defer globalMu.Unlock()
	return elasticWorker
}

// Run is Worker.Run on the process-wide world: Horovod's hvd.elastic.run
// for Go programs. Init must have been called. Outside an elastic job it
// syncs st and calls fn once.
func Run(st State, fn func(w *World) error) error {
	wk := ElasticWorker()
	if wk == nil {
		w, err := Current()
		if err != nil {
			return err
		}
		if err := syncState(w, st, false); err != nil {
			return err
		}
		return fn(w)
	}
	join := func() (*World, error) {
		if err := Init(wk.cfg); err != nil {
			return nil, err
		}
		return Current()
	}
	return wk.run(st, fn, join, Shutdown)
}
