package sdk

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/elastic"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// Elastic workers (docs/elastic.md). The protocol with hvdrun's driver
// (assignments, epochs, failure reports, host updates) is package
// sdk/elastic's; this file is the public API over it: a Worker starts each
// world it joins with Start, re-registers the process sets (setspecs.go)
// and runs Horovod's hvd.elastic.run (Run, State). Nothing of an old World
// survives its Close: its pending ops fail with ErrShutdown.

// DefaultElasticTimeout bounds the wait for an assignment and for the peers
// of a new world (HOROVOD_ELASTIC_TIMEOUT, Horovod's default 600 s).
const DefaultElasticTimeout = elastic.DefaultTimeout

// ElasticScope is the store scope the driver writes (never epoch-mapped).
const ElasticScope = elastic.Scope

// AssignGrace is how much longer than HOROVOD_ELASTIC_TIMEOUT a worker
// waits for the next world's assignment (elastic.AssignGrace).
const AssignGrace = elastic.AssignGrace

// ElasticStore reads the driver's keys (scope "elastic"). The job's HTTP
// store is used through rendezvous.Client; tests pass their own.
type ElasticStore = elastic.Store

// FailureReporter is an ElasticStore a worker can write its failure
// reports to (the job's store is one; a test's ElasticStore may be).
type FailureReporter = elastic.FailureReporter

// FailedKey is the key (scope "elastic") of the failure report that worker
// reporter writes about the world of epoch N (docs/elastic.md): its value
// is the worker id of the peer whose failure broke that world.
func FailedKey(epoch int, reporter string) string { return elastic.FailedKey(epoch, reporter) }

// Assignment and WorkerAssignment are the protocol's JSON values, defined
// once in internal/elasticproto.
type (
	Assignment       = elastic.Assignment
	WorkerAssignment = elastic.WorkerAssignment
)

// HostsUpdatedError is Horovod's HostsUpdatedInterrupt: the driver changed
// the hosts; every rank returns it from the same CheckHostUpdates call.
type HostsUpdatedError struct {
	// Flags are Horovod's HostUpdateResult: 1 removed, 2 added, 3 both.
	Flags int
	// SkipSync: only hosts were removed, so the state need not be synced
	// after the reset (Run still syncs when a new worker joined).
	SkipSync bool
}

func (e *HostsUpdatedError) Error() string {
	return fmt.Sprintf("%v (flags %d): resetting into the new world", ErrHostsUpdated, e.Flags)
}

// Is makes errors.Is(err, ErrHostsUpdated) true.
func (e *HostsUpdatedError) Is(target error) bool { return target == ErrHostsUpdated }

// IsInternalError reports whether err is what Horovod raises as
// HorovodInternalError: a collective failed (peer failure, shutdown,
// mismatch, closed communicator). Run restores the last commit and resets
// on it.
func IsInternalError(err error) bool {
	return errors.Is(err, ErrPeerFailure) || errors.Is(err, ErrShutdown) || errors.Is(err, ErrMismatch) ||
		errors.Is(err, backends.ErrClosed) || errors.Is(err, ErrNotInitialized)
}

// IsElastic reports whether the environment makes this process an elastic
// worker (HOROVOD_ELASTIC set to a non-zero integer, as hvdrun sets it).
func IsElastic(getenv func(string) (string, bool)) bool {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	v, ok := getenv("HOROVOD_ELASTIC")
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return ok && err == nil && n != 0
}

// Worker is an elastic worker: Init joins the next world, Run is Horovod's
// hvd.elastic.run. Its methods may be called from any goroutine, one at a
// time (Run, Init and Shutdown are not meant to race each other).
type Worker struct {
	core *elastic.Worker // the protocol with the driver (sdk/elastic)
	cfg  Config
	reg  *setRegistry // the process sets, kept across worlds

	mu      sync.Mutex
	resetCb []func()
}

// NewWorker reads the elastic environment (through cfg.Getenv):
// HVD_ELASTIC_WORKER_ID (required), HOROVOD_ELASTIC_TIMEOUT (seconds,
// default 600), the store address and secret, and HVD_RENDEZVOUS_EPOCH
// (the first world). It contacts nothing; Init joins a world. cfg's process
// sets and dynamic mode hold for every world the worker joins.
func NewWorker(cfg Config) (*Worker, error) {
	k := &Worker{cfg: cfg, reg: newSetRegistry(cfg.ProcessSets, cfg.SetSpecs)}
	core, err := elastic.New(elastic.Config{Getenv: cfg.Getenv, Store: cfg.ElasticStore, Logf: cfg.Logf, Join: k.join})
	if err != nil {
		return nil, err
	}
	k.core = core
	return k, nil
}

// join starts the world the driver assigned (elastic.Join): Start with the
// assigned identity and the worker's process sets.
func (k *Worker) join(ctx context.Context, id rendezvous.Identity, timeout time.Duration) (elastic.World, error) {
	cfg := k.cfg
	cfg.Identity = &id
	cfg.Generation = 0 // epochs keep worlds apart; new workers count no inits
	cfg.specs, cfg.elastic, cfg.joinTimeout = k.reg, true, timeout
	w, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newElasticView(w), nil
}

// elasticView is a World as the protocol sees it: sets are the process
// sets as the world started (their engines outlive its Close, which
// forgets its sets), for the next Init to read why they stopped.
type elasticView struct {
	w    *World
	sets []*ProcessSet
}

func newElasticView(w *World) *elasticView {
	v := &elasticView{w: w}
	w.mu.RLock()
	for _, id := range w.order {
		v.sets = append(v.sets, w.sets[id])
	}
	w.mu.RUnlock()
	return v
}

func (v *elasticView) Rank() int                       { return v.w.Rank() }
func (v *elasticView) Closed() bool                    { return v.w.closed.Load() }
func (v *elasticView) Close() error                    { return v.w.Close() }
func (v *elasticView) Logf(format string, args ...any) { v.w.logf(format, args...) }

func (v *elasticView) Broadcast(msg []int64, name string) error {
	_, err := wait(v.w.GlobalProcessSet().BroadcastAsync(TensorOf(msg), 0, name))
	return err
}

func (v *elasticView) Failures() []elastic.SetFailure {
	var out []elastic.SetFailure
	for _, ps := range v.sets {
		if ps == nil || ps.eng == nil {
			continue
		}
		err := ps.eng.Err()
		if err == nil || errors.Is(err, ErrShutdown) {
			continue
		}
		out = append(out, elastic.SetFailure{Err: err, Ranks: ps.ranks})
	}
	return out
}

// worldOf is the *World behind an elastic.World (nil for nil).
func worldOf(w elastic.World) *World {
	if v, ok := w.(*elasticView); ok {
		return v.w
	}
	return nil
}

// ID is the worker id (<host>:<slot>).
func (k *Worker) ID() string { return k.core.ID() }

// Epoch is the epoch of the current (or last) world; -1 before the first.
func (k *Worker) Epoch() int { return k.core.Epoch() }

// World is the current world, nil between a Shutdown and the next Init.
func (k *Worker) World() *World { return worldOf(k.core.World()) }

// Init joins the next world (docs/elastic.md, "A worker's
// (re-)initialisation") and returns it; while a world is open it returns
// that one. It fails with ErrRemoved when the driver removed this worker,
// and when no assignment or peers come within HOROVOD_ELASTIC_TIMEOUT.
func (k *Worker) Init(ctx context.Context) (*World, error) {
	w, err := k.core.Init(ctx)
	if err != nil {
		return nil, err
	}
	return worldOf(w), nil
}

// Shutdown closes the current world (its pending ops fail with
// ErrShutdown); the next Init joins the next world.
func (k *Worker) Shutdown() error { return k.core.Shutdown() }

// Close shuts the world down and drops the store connections.
func (k *Worker) Close() error { return k.core.Close() }

// RegisterResetCallbacks adds functions Run calls after every reset, once
// the new world is up (Horovod's state.register_reset_callbacks).
func (k *Worker) RegisterResetCallbacks(fns ...func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.resetCb = append(k.resetCb, fns...)
}

// HostsUpdated reads elastic/hosts_updated: the driver's seq and flags (ok
// false while it was never written).
func (k *Worker) HostsUpdated(ctx context.Context) (seq int64, flags int, ok bool, err error) {
	return k.core.HostsUpdated(ctx)
}

// CheckHostUpdates is Horovod's state.check_host_updates(), a collective
// over the global set: rank 0 reads elastic/hosts_updated and broadcasts
// (previous seq, newest seq, flags); when the seq grew and the driver has
// published a newer world than this one, every rank returns a
// *HostsUpdatedError. An update already reflected by the current world
// (the driver writes assign.<N> before hosts_updated) does not interrupt.
func (k *Worker) CheckHostUpdates() error {
	w := k.core.World()
	if w == nil {
		return ErrNotInitialized
	}
	flags, updated, err := k.core.CheckHostUpdates(w)
	if err != nil {
		return err
	}
	if updated {
		return &HostsUpdatedError{Flags: flags, SkipSync: flags == 1}
	}
	return nil
}

// State is what Run keeps identical on every rank across resets (Horovod's
// hvd.elastic.State): Save snapshots it in memory (Commit), Restore goes
// back to the snapshot after a failure, Sync makes every rank hold global
// rank 0's (a collective over w's global set).
type State interface {
	Save() error
	Restore() error
	Sync(w *World) error
}

// Commit is Horovod's state.commit(): st.Save(), then CheckHostUpdates.
func (k *Worker) Commit(st State) error {
	if err := st.Save(); err != nil {
		return err
	}
	return k.CheckHostUpdates()
}

// Run is Horovod's hvd.elastic.run: it joins a world (Init), syncs st from
// rank 0 and calls fn until fn returns nil (Run returns nil) or an error
// that is neither internal nor a host update (returned as is). On an
// internal error (IsInternalError) it restores st's last commit; on a
// *HostsUpdatedError it keeps st; then it resets (closes the world, joins
// the next one, calls the reset callbacks) and goes on. ErrRemoved from a
// reset is returned: the process should then exit 0. After a reset st is
// synced from the new rank 0 and saved, unless every rank skips the sync
// (only hosts removed, no new worker).
func (k *Worker) Run(st State, fn func(w *World) error) error {
	return k.run(st, fn, func() (*World, error) { return k.Init(context.Background()) }, k.Shutdown)
}

// run is Run's loop; join and leave are Init and Shutdown (of the Worker,
// or the package-level ones, which also keep Current right).
func (k *Worker) run(st State, fn func(w *World) error, join func() (*World, error), leave func() error) error {
	skipSync := false
	for {
		w, err := join()
		if err != nil {
			return err
		}
		if err = syncState(w, st, skipSync); err == nil {
			if err = fn(w); err == nil {
				return nil
			}
		}
		var hu *HostsUpdatedError
		switch {
		case errors.As(err, &hu):
			skipSync = hu.SkipSync
		case IsInternalError(err):
			k.core.Failed(err)
			if rerr := st.Restore(); rerr != nil {
				return fmt.Errorf("hvd: elastic: restoring the last commit after %s: %w", unprefixed(err), rerr)
			}
			skipSync = false
		default:
			return err
		}
		k.core.Logf("hvd: elastic: resetting after: %s", unprefixed(err))
		if err := leave(); err != nil {
			return err
		}
		if _, err := join(); err != nil {
			return err
		}
		k.mu.Lock()
		cbs := slices.Clone(k.resetCb)
		k.mu.Unlock()
		for _, cb := range cbs {
			cb()
		}
	}
}

// syncState syncs st from rank 0 and saves it, unless every rank skips:
// a worker that just joined never skips, so the ranks agree first (one
// small allreduce) instead of some syncing alone (Horovod's issue 3494).
func syncState(w *World, st State, skip bool) error {
	if want, err := AgreeSync(w, skip); err != nil || !want {
		return err
	}
	if err := st.Sync(w); err != nil {
		return err
	}
	return st.Save()
}

// AgreeSync is the collective that decides whether a reset syncs the
// state: true unless every rank skips (a worker that just joined never
// does). Run calls it; the Python package's hvd.elastic.run too.
func AgreeSync(w *World, skip bool) (bool, error) {
	want := []int32{1}
	if skip {
		want[0] = 0
	}
	if err := w.GlobalProcessSet().AllreduceInPlace(TensorOf(want), ReduceOptions{Op: Max, Name: "hvd.elastic.want_sync"}); err != nil {
		return false, err
	}
	return want[0] != 0, nil
}

// ObjectState is a State over Go values held by pointer (Horovod's
// ObjectState): Save gob-encodes them, Restore decodes the snapshot back
// into them, Sync broadcasts global rank 0's current values.
type ObjectState struct {
	names  []string
	values map[string]any
	saved  []byte
}

// NewObjectState keeps values: name -> pointer to a gob-encodable value.
func NewObjectState(values map[string]any) *ObjectState {
	s := &ObjectState{values: values}
	for n := range values {
		s.names = append(s.names, n)
	}
	sort.Strings(s.names)
	return s
}

func (s *ObjectState) encode() ([]byte, error) {
	var b bytes.Buffer
	enc := gob.NewEncoder(&b)
	for _, n := range s.names {
		if err := enc.Encode(s.values[n]); err != nil {
			return nil, fmt.Errorf("hvd: ObjectState: encoding %s: %w", n, err)
		}
	}
	return b.Bytes(), nil
}

func (s *ObjectState) decode(b []byte) error {
	dec := gob.NewDecoder(bytes.NewReader(b))
	for _, n := range s.names {
		if err := dec.Decode(s.values[n]); err != nil {
			return fmt.Errorf("hvd: ObjectState: decoding %s: %w", n, err)
		}
	}
	return nil
}

// Save snapshots the values.
func (s *ObjectState) Save() error {
	b, err := s.encode()
	if err == nil {
		s.saved = b
	}
	return err
}

// Restore sets the values back to the last snapshot (nothing before the
// first Save).
func (s *ObjectState) Restore() error {
	if s.saved == nil {
		return nil
	}
	return s.decode(s.saved)
}

// Sync sets every rank's values to global rank 0's.
func (s *ObjectState) Sync(w *World) error {
	b, err := s.encode()
	if err != nil {
		return err
	}
	if b, err = BroadcastBytes(w, b, "hvd.elastic.object_state"); err != nil {
		return err
	}
	return s.decode(b)
}

// BroadcastBytes returns global rank 0's b on every rank (a collective over
// the global set; name must be the same on every rank).
func BroadcastBytes(w *World, b []byte, name string) ([]byte, error) {
	g := w.GlobalProcessSet()
	n := []int64{int64(len(b))}
	if _, err := wait(g.BroadcastAsync(TensorOf(n), 0, name+".len")); err != nil {
		return nil, err
	}
	if w.Rank() != 0 {
		b = make([]byte, n[0])
	}
	if n[0] == 0 {
		return b, nil
	}
	if _, err := wait(g.BroadcastAsync(TensorOf(b), 0, name+".data")); err != nil {
		return nil, err
	}
	return b, nil
}

// unprefixed is err's message without the "hvd: " its text usually starts
// with, for a line that starts with "hvd: elastic: " (no doubled prefix).
func unprefixed(err error) string { return strings.TrimPrefix(err.Error(), "hvd: ") }
