package sdk

import (
	"context"
	"sync"
)

// The process-wide World, as Horovod's hvd.init()/hvd.shutdown() manage it.
var (
	globalMu sync.Mutex
	current  *World
)

// inits counts successful Inits in this process (Config.Generation).
var inits int

// Init joins the job as the process-wide World (see Start). Calling Init
// again while initialised is harmless and changes nothing (new process sets
// are not registered, as in Horovod); Init after Shutdown starts a new World
// (elastic resets rely on it).
func Init(cfg Config) error {
	globalMu.Lock()
	defer globalMu.Unlock()
	if current != nil {
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
