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
	"github.com/hvdorg/hvd/internal/elasticproto"
	"github.com/hvdorg/hvd/sdk/rendezvous"
	"golang.org/x/sys/unix"
)

// Elastic workers (docs/elastic.md). A Worker is one process of an elastic
// job across the worlds it joins: hvdrun's driver publishes every world's
// assignment under the store's plain scope "elastic"; Worker.Init joins the
// next world with the identity assigned there, at that world's rendezvous
// epoch, and re-registers the process sets (setspecs.go). Nothing of an old
// World survives its Close: its pending ops fail with ErrShutdown.

// DefaultElasticTimeout bounds the wait for an assignment and for the peers
// of a new world (HOROVOD_ELASTIC_TIMEOUT, Horovod's default 600 s).
const DefaultElasticTimeout = 600 * time.Second

// ElasticScope is the store scope the driver writes (never epoch-mapped).
const ElasticScope = elasticproto.Scope

// AssignGrace is how much longer than HOROVOD_ELASTIC_TIMEOUT a worker
// waits for the next world's assignment. The driver waits up to the same
// timeout (--elastic-timeout) for enough slots and then ends the job with a
// message naming the hosts; the worker's wait is only a backstop for a
// driver that is gone, so it must not end first and turn that verdict into
// "every worker failed".
const AssignGrace = 10 * time.Second

// epochPoll is how often a worker that joins a world checks whether the
// driver has moved on to a newer one (step 5 of docs/elastic.md).
const epochPoll = 100 * time.Millisecond

// ElasticStore reads the driver's keys (scope "elastic"). The job's HTTP
// store is used through rendezvous.Client; tests pass their own.
type ElasticStore interface {
	// Get waits until key exists and returns its value, bounded by ctx.
	Get(ctx context.Context, key string) ([]byte, error)
	// TryGet returns key's value, or ok false when it does not exist yet.
	TryGet(ctx context.Context, key string) (value []byte, ok bool, err error)
}

type clientElasticStore struct{ c *rendezvous.Client }

func (s clientElasticStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.c.Get(ctx, ElasticScope, key)
}

func (s clientElasticStore) TryGet(ctx context.Context, key string) ([]byte, bool, error) {
	return s.c.TryGet(ctx, ElasticScope, key)
}

func (s clientElasticStore) Put(ctx context.Context, key string, value []byte) error {
	return s.c.Put(ctx, ElasticScope, key, value)
}

// FailureReporter is an ElasticStore a worker can write its failure
// reports to (the job's store is one; a test's ElasticStore may be).
type FailureReporter interface {
	Put(ctx context.Context, key string, value []byte) error
}

// FailedKey is the key (scope "elastic") of the failure report that worker
// reporter writes about the world of epoch N (docs/elastic.md): its value
// is the worker id of the peer whose failure broke that world.
func FailedKey(epoch int, reporter string) string { return elasticproto.FailedKey(epoch, reporter) }

// reportTimeout bounds the write of a failure report.
const reportTimeout = 2 * time.Second

// Assignment and WorkerAssignment are the protocol's JSON values, defined
// once in internal/elasticproto.
type (
	Assignment       = elasticproto.Assignment
	WorkerAssignment = elasticproto.WorkerAssignment
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
	mu      sync.Mutex
	cfg     Config
	id      string
	base    rendezvous.Identity
	store   ElasticStore
	client  *rendezvous.Client
	timeout time.Duration
	grace   time.Duration // AssignGrace; tests shorten it
	logf    func(format string, args ...any)

	epoch   int // epoch of the newest world joined; -1 before the first
	assign  Assignment
	world   *World
	reg     *setRegistry
	lastSeq int64 // newest hosts_updated seq acted on (Horovod's last timestamp)
	// watched are the process sets of the current world as it started
	// (their engines outlive the world's Close, which forgets its sets):
	// the next Init reads why they stopped (reportFailure).
	watched  []*ProcessSet
	reported int   // newest epoch whose failure was considered; -1 none
	failErr  error // the internal error Run reset after, for reportFailure
	resetCb  []func()
	trace    bool // HVD_ELASTIC_TRACE: log the phases of a (re-)initialisation
}

// tracef logs one phase of a (re-)initialisation with CLOCK_MONOTONIC's
// time, the clock Python's time.monotonic() reads, so that bench/elastic
// can line it up with its own and the training script's timestamps. Only
// with HVD_ELASTIC_TRACE=1 (a debugging aid, not an interface).
func (k *Worker) tracef(event string, epoch int) {
	if !k.trace {
		return
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		fmt.Fprintf(os.Stderr, "hvd: elastic trace: %s epoch=%d t=%d.%09d\n", event, epoch, ts.Sec, ts.Nsec)
	}
}

// NewWorker reads the elastic environment (through cfg.Getenv):
// HVD_ELASTIC_WORKER_ID (required), HOROVOD_ELASTIC_TIMEOUT (seconds,
// default 600), the store address and secret, and HVD_RENDEZVOUS_EPOCH
// (the first world). It contacts nothing; Init joins a world. cfg's process
// sets and dynamic mode hold for every world the worker joins.
func NewWorker(cfg Config) (*Worker, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	wid, _ := getenv(elasticproto.EnvWorkerID)
	if wid = strings.TrimSpace(wid); wid == "" {
		return nil, fmt.Errorf("%w: HOROVOD_ELASTIC is set but HVD_ELASTIC_WORKER_ID is not: elastic workers are started by hvdrun's elastic driver (hvdrun --min-np/--host-discovery-script)", ErrInvalidArgument)
	}
	timeout := DefaultElasticTimeout
	if v, ok := getenv("HOROVOD_ELASTIC_TIMEOUT"); ok && strings.TrimSpace(v) != "" {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f <= 0 {
			return nil, fmt.Errorf("%w: HOROVOD_ELASTIC_TIMEOUT=%q is not a positive number of seconds", ErrInvalidArgument, v)
		}
		timeout = time.Duration(f * float64(time.Second))
	}
	base, err := rendezvous.DetectIdentity(getenv)
	if err != nil {
		return nil, err
	}
	if base.Timeout <= 0 {
		base.Timeout = 30 * time.Second
	}
	k := &Worker{cfg: cfg, id: wid, base: base, timeout: timeout, grace: AssignGrace, epoch: -1, reported: -1, store: cfg.ElasticStore,
		reg: newSetRegistry(cfg.ProcessSets, cfg.SetSpecs)}
	if v, _ := getenv("HVD_ELASTIC_TRACE"); strings.TrimSpace(v) == "1" {
		k.trace = true
	}
	k.logf = cfg.Logf
	if k.logf == nil {
		// No "[<worker id>] " of its own: hvdrun's elastic driver, which
		// starts every elastic worker, prefixes each output line with it.
		k.logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	if k.store == nil {
		if base.StoreAddr == "" {
			return nil, fmt.Errorf("%w: elastic worker %s has no rendezvous store address (HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT)", ErrInvalidArgument, wid)
		}
		// Epoch 0: the "elastic" scope is never epoch-mapped.
		k.client = rendezvous.NewClient(rendezvous.ClientConfig{Addr: base.StoreAddr, Secret: base.Secret, Timeout: timeout + k.grace})
		k.store = clientElasticStore{k.client}
	}
	return k, nil
}

// ID is the worker id (<host>:<slot>).
func (k *Worker) ID() string { return k.id }

// Epoch is the epoch of the current (or last) world; -1 before the first.
func (k *Worker) Epoch() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epoch
}

// World is the current world, nil between a Shutdown and the next Init.
func (k *Worker) World() *World {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.world == nil || k.world.closed.Load() {
		return nil
	}
	return k.world
}

// Init joins the next world (docs/elastic.md, "A worker's
// (re-)initialisation") and returns it; while a world is open it returns
// that one. It fails with ErrRemoved when the driver removed this worker,
// and when no assignment or peers come within HOROVOD_ELASTIC_TIMEOUT.
func (k *Worker) Init(ctx context.Context) (*World, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.world != nil && !k.world.closed.Load() {
		return k.world, nil
	}
	k.world = nil
	target := k.base.Epoch
	// After a failure, the live workers of the failed world join the next
	// one at once (their collectives failed too): one that does not is
	// reported (reportAbsent). New workers may take long to start, and
	// after a host update the old workers come at their next commit.
	var expected map[string]WorkerAssignment
	if k.epoch >= 0 {
		if k.reportFailure(ctx) {
			expected = k.assign.Workers
		}
		target = k.epoch + 1
		cur, ok, err := k.readEpoch(ctx)
		if err != nil {
			return nil, fmt.Errorf("hvd: elastic worker %s: reading the newest epoch: %w", k.id, err)
		}
		if ok && cur > target {
			target = cur
		}
	}
	k.tracef("init", target)
	for {
		a, err := k.waitAssign(ctx, target)
		if err != nil {
			return nil, err
		}
		k.tracef("assigned", target)
		me, ok := a.Workers[k.id]
		if !ok || slices.Contains(a.Removed, k.id) {
			k.epoch = target
			return nil, fmt.Errorf("%w: worker %s is not part of the world of epoch %d (%d ranks); it should exit", ErrRemoved, k.id, target, a.Size)
		}
		w, err := k.start(ctx, target, a, me, expected)
		if err == nil {
			k.tracef("world", target)
			k.epoch, k.assign, k.world = target, a, w
			w.mu.RLock()
			k.watched = k.watched[:0]
			for _, id := range w.order {
				k.watched = append(k.watched, w.sets[id])
			}
			w.mu.RUnlock()
			return w, nil
		}
		cur, ok, rerr := k.readEpoch(ctx)
		if rerr == nil && ok && cur > target {
			k.logf("hvd: elastic: joining the world of epoch %d failed (%s); the driver has moved on to epoch %d", target, unprefixed(err), cur)
			target = cur
			continue
		}
		hint := ""
		if errors.Is(err, rendezvous.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			hint = fmt.Sprintf(" (not every worker of the world joined within HOROVOD_ELASTIC_TIMEOUT, %v: the workers of the previous world join at their next commit, so they must call state.commit() or check_host_updates() regularly)", k.timeout)
		}
		return nil, fmt.Errorf("hvd: elastic worker %s: joining the world of epoch %d%s: %w", k.id, target, hint, err)
	}
}

// start joins the world of epoch target; the join is abandoned as soon as
// the driver publishes a newer epoch.
func (k *Worker) start(ctx context.Context, target int, a Assignment, me WorkerAssignment, expected map[string]WorkerAssignment) (*World, error) {
	id := k.base
	id.Rank, id.Size = me.Rank, me.Size
	id.LocalRank, id.LocalSize, id.CrossRank, id.CrossSize = me.LocalRank, me.LocalSize, me.CrossRank, me.CrossSize
	if me.Hostname != "" {
		id.Hostname = me.Hostname
	}
	id.Epoch = target
	id.ServeStore = false // the driver serves the store
	cfg := k.cfg
	cfg.Identity = &id
	cfg.Generation = 0 // epochs keep worlds apart; new workers count no inits
	cfg.specs, cfg.elastic, cfg.joinTimeout = k.reg, true, k.timeout
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, done := make(chan struct{}), make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(epochPoll)
		defer t.Stop()
		absent := false // reported (or checked) the workers that did not join
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if cur, ok, err := k.readEpoch(sctx); err == nil && ok && cur > target {
					cancel()
					return
				}
				if !absent && expected != nil && time.Since(began) >= k.base.Timeout {
					absent = true
					k.reportAbsent(sctx, a, me.Rank, expected)
				}
			}
		}
	}()
	w, err := Start(sctx, cfg)
	close(stop)
	cancel() // a store read in flight ends now (Start keeps nothing of ctx)
	<-done
	return w, err
}

// reportAbsent tells the driver about a worker of the world of epoch
// target that has not joined it after HOROVOD_GLOO_TIMEOUT_SECONDS of this
// worker waiting (docs/elastic.md, "Failures"): the first such rank's worker
// id (its host key is missing from the world's store), among the expected
// workers (those of the failed world this one left), goes to
// elastic/failed.<target>.<this id>. A worker alive but stopped (SIGSTOP),
// or cut off, never joins; without the report the survivors would wait
// for it until HOROVOD_ELASTIC_TIMEOUT with nothing said. Runs on start's
// poll goroutine (k.mu is held by Init: it touches only what does not
// change during a join). Needs the job's store (k.client).
func (k *Worker) reportAbsent(ctx context.Context, a Assignment, rank int, expected map[string]WorkerAssignment) {
	target := a.Epoch
	rep, ok := k.store.(FailureReporter)
	if !ok || k.client == nil {
		return
	}
	for r := range a.Size {
		if r == rank {
			continue
		}
		_, ok, err := k.client.TryGet(ctx, rendezvous.EpochScope(worldScope, target), rendezvous.TopologyKey(r))
		if err != nil || ok {
			continue
		}
		wid := ""
		for id, m := range a.Workers {
			if _, was := expected[id]; m.Rank == r && was {
				wid = id
			}
		}
		if wid == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, reportTimeout)
		defer cancel()
		key := FailedKey(target, k.id)
		if err := rep.Put(rctx, key, []byte(wid)); err != nil {
			k.logf("hvd: elastic: reporting worker %s, which has not joined the world of epoch %d: %v", wid, target, err)
			return
		}
		k.logf("hvd: elastic: worker %s (rank %d of epoch %d) has not joined the world within HOROVOD_GLOO_TIMEOUT_SECONDS (%v); reported it to the driver (%s)",
			wid, r, target, k.base.Timeout, ElasticScope+"/"+key)
		return
	}
}

// reportFailure tells the driver which peer broke the world this worker
// leaves (docs/elastic.md, "Failures"): when a collective of that world
// failed with an error naming a peer (a *backends.PeerError with its
// global rank), it writes elastic/failed.<N>.<this id> = the peer's worker
// id in that world's assignment. The driver stops a reported worker that
// still runs (a host cut off from the network: its process lives on) and
// publishes the next world instead of waiting for it. When the world failed
// without naming anyone (or named this worker), the value is empty: the
// report then only says that this worker is alive and resetting, so that
// the driver neither waits for it nor believes another survivor that
// blamed it. Best effort, once per world; k.mu is held. It returns whether
// the world failed.
func (k *Worker) reportFailure(ctx context.Context) bool {
	if k.reported >= k.epoch {
		return false
	}
	k.reported = k.epoch
	why := k.failErr
	k.failErr = nil
	culprit, _ := peerCulprit(why, nil)
	for _, ps := range k.watched {
		if ps == nil || ps.eng == nil {
			continue
		}
		err := ps.eng.Err()
		if err == nil || errors.Is(err, ErrShutdown) {
			continue
		}
		if why == nil {
			why = err
		}
		if culprit < 0 {
			if g, ok := peerCulprit(err, ps.ranks); ok {
				culprit, why = g, err
			}
		}
	}
	if why == nil {
		return false // the world ended well (a host update, a removal)
	}
	wid := ""
	for id, m := range k.assign.Workers {
		if m.Rank == culprit && culprit >= 0 && id != k.id {
			wid = id
		}
	}
	rep, ok := k.store.(FailureReporter)
	if !ok {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	key := FailedKey(k.epoch, k.id)
	if err := rep.Put(rctx, key, []byte(wid)); err != nil {
		k.logf("hvd: elastic: reporting the failure of the world of epoch %d to the driver: %v", k.epoch, err)
		return true
	}
	if wid != "" {
		k.logf("hvd: elastic: reported worker %s (rank %d of epoch %d) as failed to the driver (%s): %s", wid, culprit, k.epoch, ElasticScope+"/"+key, unprefixed(why))
	}
	return true
}

// peerCulprit returns the global rank of the peer err blames, when err is
// a *backends.PeerError and that peer failed by itself: a peer that closed
// its communicator or stopped on purpose after its own failure ("it
// stopped: <its reason>", the tcp backend) is alive and resetting, so it is
// not named. ranks maps set ranks to global ranks when the error does not
// carry the global rank.
func peerCulprit(err error, ranks []int) (int, bool) {
	var pe *backends.PeerError
	if err == nil || !errors.As(err, &pe) {
		return -1, false
	}
	if pe.Err != nil {
		if msg := pe.Err.Error(); strings.HasPrefix(msg, "it stopped:") || strings.Contains(msg, "closed the communicator (shut down)") {
			return -1, false
		}
	}
	if pe.Global >= 0 {
		return pe.Global, true
	}
	if pe.Peer >= 0 && pe.Peer < len(ranks) {
		return ranks[pe.Peer], true
	}
	return -1, false
}

func (k *Worker) readEpoch(ctx context.Context) (int, bool, error) {
	v, ok, err := k.store.TryGet(ctx, elasticproto.EpochKey)
	if err != nil || !ok {
		return 0, false, err
	}
	n, err := elasticproto.ParseEpoch(v)
	if err != nil {
		return 0, false, err
	}
	return n, true, nil
}

func (k *Worker) waitAssign(ctx context.Context, epoch int) (Assignment, error) {
	key := elasticproto.AssignKey(epoch)
	wctx, cancel := context.WithTimeout(ctx, k.timeout+k.grace)
	defer cancel()
	v, err := k.store.Get(wctx, key)
	if err != nil {
		return Assignment{}, fmt.Errorf("hvd: elastic worker %s: no assignment %s/%s within %v (HOROVOD_ELASTIC_TIMEOUT + %v): is hvdrun's elastic driver running? %w",
			k.id, ElasticScope, key, k.timeout, k.grace, err)
	}
	return elasticproto.ParseAssignment(epoch, v)
}

// Shutdown closes the current world (its pending ops fail with
// ErrShutdown); the next Init joins the next world.
func (k *Worker) Shutdown() error {
	k.mu.Lock()
	w := k.world
	k.world = nil
	k.mu.Unlock()
	if w != nil {
		return w.Close()
	}
	return nil
}

// Close shuts the world down and drops the store connections.
func (k *Worker) Close() error {
	err := k.Shutdown()
	if k.client != nil {
		k.client.Close()
	}
	return err
}

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
	v, ok, err := k.store.TryGet(ctx, elasticproto.HostsUpdatedKey)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	if seq, flags, err = elasticproto.ParseHostsUpdated(v); err != nil {
		return 0, 0, false, err
	}
	return seq, flags, true, nil
}

// CheckHostUpdates is Horovod's state.check_host_updates(), a collective
// over the global set: rank 0 reads elastic/hosts_updated and broadcasts
// (previous seq, newest seq, flags); when the seq grew and the driver has
// published a newer world than this one, every rank returns a
// *HostsUpdatedError. An update already reflected by the current world
// (the driver writes assign.<N> before hosts_updated) does not interrupt.
func (k *Worker) CheckHostUpdates() error {
	w := k.World()
	if w == nil {
		return ErrNotInitialized
	}
	k.mu.Lock()
	prev, epoch := k.lastSeq, k.epoch
	k.mu.Unlock()
	msg := []int64{prev, prev, 0}
	if w.Rank() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), w.id.Timeout)
		seq, flags, ok, err := k.HostsUpdated(ctx)
		if err == nil && ok && seq > prev {
			if cur, cok, cerr := k.readEpoch(ctx); cerr == nil && cok && cur > epoch {
				msg = []int64{prev, seq, int64(flags)}
			} else {
				msg = []int64{seq, seq, 0} // reflected by this world already
			}
		} else if err != nil {
			// Every rank waits for the broadcast: answer "no update".
			w.logf("hvd: elastic: reading elastic/hosts_updated: %v", err)
		}
		cancel()
	}
	if _, err := wait(w.GlobalProcessSet().BroadcastAsync(TensorOf(msg), 0, "hvd.elastic.check_host_updates")); err != nil {
		return err
	}
	k.mu.Lock()
	k.lastSeq = max(k.lastSeq, msg[1])
	k.mu.Unlock()
	if msg[1] > msg[0] {
		return &HostsUpdatedError{Flags: int(msg[2]), SkipSync: msg[2] == 1}
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
			k.mu.Lock()
			k.failErr = err
			k.mu.Unlock()
			if rerr := st.Restore(); rerr != nil {
				return fmt.Errorf("hvd: elastic: restoring the last commit after %s: %w", unprefixed(err), rerr)
			}
			skipSync = false
		default:
			return err
		}
		k.logf("hvd: elastic: resetting after: %s", unprefixed(err))
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
