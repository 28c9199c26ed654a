// Package elastic is an elastic worker's side of the protocol with hvdrun's
// elastic driver (docs/elastic.md): the driver publishes every world's
// assignment under the store's plain scope "elastic" (the keys and values
// are internal/elasticproto's); a Worker reads them, joins the next world
// with the identity assigned there, at that world's rendezvous epoch, moves
// on when the driver publishes a newer one, and reports which peer broke a
// world. It knows a world only through the World interface: the sdk starts
// the worlds (Config.Join), keeps the process sets across them and the
// public API (sdk.Worker, sdk.Run, State). Nothing of an old world survives
// its Close.
package elastic

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/internal/elasticproto"
	"github.com/hvdorg/hvd/sdk/rendezvous"
	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds the wait for an assignment and for the peers of a
// new world (HOROVOD_ELASTIC_TIMEOUT, Horovod's default 600 s).
const DefaultTimeout = 600 * time.Second

// Scope is the store scope the driver writes (never epoch-mapped).
const Scope = elasticproto.Scope

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

// reportTimeout bounds the write of a failure report.
const reportTimeout = 2 * time.Second

// ErrRemoved: the elastic driver removed this worker from the job; the
// worker should exit 0 (sdk.ErrRemoved is this error).
var ErrRemoved = errors.New("hvd: this worker has been removed from the elastic job")

// Store reads the driver's keys (scope "elastic"). The job's HTTP store is
// used through rendezvous.Client; tests pass their own.
type Store interface {
	// Get waits until key exists and returns its value, bounded by ctx.
	Get(ctx context.Context, key string) ([]byte, error)
	// TryGet returns key's value, or ok false when it does not exist yet.
	TryGet(ctx context.Context, key string) (value []byte, ok bool, err error)
}

type clientStore struct{ c *rendezvous.Client }

func (s clientStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.c.Get(ctx, Scope, key)
}

func (s clientStore) TryGet(ctx context.Context, key string) ([]byte, bool, error) {
	return s.c.TryGet(ctx, Scope, key)
}

func (s clientStore) Put(ctx context.Context, key string, value []byte) error {
	return s.c.Put(ctx, Scope, key, value)
}

// FailureReporter is a Store a worker can write its failure reports to
// (the job's store is one; a test's Store may be).
type FailureReporter interface {
	Put(ctx context.Context, key string, value []byte) error
}

// FailedKey is the key (scope "elastic") of the failure report that worker
// reporter writes about the world of epoch N (docs/elastic.md): its value
// is the worker id of the peer whose failure broke that world.
func FailedKey(epoch int, reporter string) string { return elasticproto.FailedKey(epoch, reporter) }

// Assignment and WorkerAssignment are the protocol's JSON values, defined
// once in internal/elasticproto.
type (
	Assignment       = elasticproto.Assignment
	WorkerAssignment = elasticproto.WorkerAssignment
)

// World is what a Worker needs of a world it joined (the sdk's *World).
type World interface {
	// Rank is this process's global rank in the world.
	Rank() int
	// Closed reports whether the world was closed.
	Closed() bool
	// Close closes the world; its pending ops fail.
	Close() error
	// Failures are the errors the world's process sets, as the world
	// started, stopped with (shutdowns left out), in set order.
	Failures() []SetFailure
	// Broadcast gives every rank global rank 0's msg (a collective over the
	// global set; name must be the same on every rank).
	Broadcast(msg []int64, name string) error
	// Logf writes a warning as the world does (with its rank).
	Logf(format string, args ...any)
}

// SetFailure is why one process set of a world stopped.
type SetFailure struct {
	Err error
	// Ranks maps the set's ranks to global ranks.
	Ranks []int
}

// Join starts this process's part of the world of epoch id.Epoch with
// identity id, waiting up to timeout for the peers; ctx is cancelled when
// the driver moves on to a newer epoch.
type Join func(ctx context.Context, id rendezvous.Identity, timeout time.Duration) (World, error)

// Config is what New needs besides the environment.
type Config struct {
	// Getenv reads the launch environment; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// Store, when set, replaces the job store's "elastic" scope (tests play
	// the driver with it).
	Store Store
	// Logf receives the worker's messages; nil writes lines to stderr.
	Logf func(format string, args ...any)
	// Join starts a world (the sdk's Start).
	Join Join
}

// Worker is one process of an elastic job across the worlds it joins. Its
// methods may be called from any goroutine; Init, Shutdown and the sdk's
// Run are not meant to race each other.
type Worker struct {
	mu      sync.Mutex
	id      string
	base    rendezvous.Identity
	store   Store
	client  *rendezvous.Client
	join    Join
	timeout time.Duration
	grace   time.Duration // AssignGrace; tests shorten it
	logf    func(format string, args ...any)

	epoch   int // epoch of the newest world joined; -1 before the first
	assign  Assignment
	world   World
	lastSeq int64 // newest hosts_updated seq acted on (Horovod's last timestamp)
	// failed is why the current world stopped, read from its sets (whose
	// engines outlive the world's Close) by the next Init (reportFailure).
	failed   func() []SetFailure
	reported int   // newest epoch whose failure was considered; -1 none
	failErr  error // the internal error a reset followed, for reportFailure
	trace    bool  // HVD_ELASTIC_TRACE: log the phases of a (re-)initialisation
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

// New reads the elastic environment (through cfg.Getenv):
// HVD_ELASTIC_WORKER_ID (required), HOROVOD_ELASTIC_TIMEOUT (seconds,
// default 600), the store address and secret, and HVD_RENDEZVOUS_EPOCH
// (the first world). It contacts nothing; Init joins a world.
func New(cfg Config) (*Worker, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	wid, _ := getenv(elasticproto.EnvWorkerID)
	if wid = strings.TrimSpace(wid); wid == "" {
		return nil, fmt.Errorf("%w: HOROVOD_ELASTIC is set but HVD_ELASTIC_WORKER_ID is not: elastic workers are started by hvdrun's elastic driver (hvdrun --min-np/--host-discovery-script)", backends.ErrInvalidArgument)
	}
	timeout := DefaultTimeout
	if v, ok := getenv("HOROVOD_ELASTIC_TIMEOUT"); ok && strings.TrimSpace(v) != "" {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f <= 0 {
			return nil, fmt.Errorf("%w: HOROVOD_ELASTIC_TIMEOUT=%q is not a positive number of seconds", backends.ErrInvalidArgument, v)
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
	k := &Worker{id: wid, base: base, join: cfg.Join, timeout: timeout, grace: AssignGrace, epoch: -1, reported: -1, store: cfg.Store}
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
			return nil, fmt.Errorf("%w: elastic worker %s has no rendezvous store address (HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT)", backends.ErrInvalidArgument, wid)
		}
		// Epoch 0: the "elastic" scope is never epoch-mapped.
		k.client = rendezvous.NewClient(rendezvous.ClientConfig{Addr: base.StoreAddr, Secret: base.Secret, Timeout: timeout + k.grace})
		k.store = clientStore{k.client}
	}
	return k, nil
}

// SetTimeouts replaces HOROVOD_ELASTIC_TIMEOUT (elastic), the wait for
// peers (HOROVOD_GLOO_TIMEOUT_SECONDS: peers) and AssignGrace (grace); a
// negative value keeps one. For tests (which shorten them), before the
// first Init.
func (k *Worker) SetTimeouts(elastic, peers, grace time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if elastic >= 0 {
		k.timeout = elastic
	}
	if peers >= 0 {
		k.base.Timeout = peers
	}
	if grace >= 0 {
		k.grace = grace
	}
}

// ID is the worker id (<host>:<slot>).
func (k *Worker) ID() string { return k.id }

// Logf writes a message as the worker does.
func (k *Worker) Logf(format string, args ...any) { k.logf(format, args...) }

// Epoch is the epoch of the current (or last) world; -1 before the first.
func (k *Worker) Epoch() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epoch
}

// World is the current world, nil between a Shutdown and the next Init.
func (k *Worker) World() World {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.world == nil || k.world.Closed() {
		return nil
	}
	return k.world
}

// Failed records err, the internal error a reset follows: the next Init
// reports the peer it names (reportFailure).
func (k *Worker) Failed(err error) {
	k.mu.Lock()
	k.failErr = err
	k.mu.Unlock()
}

// Init joins the next world (docs/elastic.md, "A worker's
// (re-)initialisation") and returns it; while a world is open it returns
// that one. It fails with ErrRemoved when the driver removed this worker,
// and when no assignment or peers come within HOROVOD_ELASTIC_TIMEOUT.
func (k *Worker) Init(ctx context.Context) (World, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.world != nil && !k.world.Closed() {
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
			k.failed = w.Failures
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
func (k *Worker) start(ctx context.Context, target int, a Assignment, me WorkerAssignment, expected map[string]WorkerAssignment) (World, error) {
	id := k.base
	id.Rank, id.Size = me.Rank, me.Size
	id.LocalRank, id.LocalSize, id.CrossRank, id.CrossSize = me.LocalRank, me.LocalSize, me.CrossRank, me.CrossSize
	if me.Hostname != "" {
		id.Hostname = me.Hostname
	}
	id.Epoch = target
	id.ServeStore = false // the driver serves the store
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
	w, err := k.join(sctx, id, k.timeout)
	close(stop)
	cancel() // a store read in flight ends now (the join keeps nothing of ctx)
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
		_, ok, err := k.client.TryGet(ctx, rendezvous.EpochScope(rendezvous.WorldScope, target), rendezvous.TopologyKey(r))
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
			wid, r, target, k.base.Timeout, Scope+"/"+key)
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
	culprit, _ := PeerCulprit(why, nil)
	var sets []SetFailure
	if k.failed != nil {
		sets = k.failed()
	}
	for _, f := range sets {
		if why == nil {
			why = f.Err
		}
		if culprit < 0 {
			if g, ok := PeerCulprit(f.Err, f.Ranks); ok {
				culprit, why = g, f.Err
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
		k.logf("hvd: elastic: reported worker %s (rank %d of epoch %d) as failed to the driver (%s): %s", wid, culprit, k.epoch, Scope+"/"+key, unprefixed(why))
	}
	return true
}

// PeerCulprit returns the global rank of the peer err blames, when err is
// a *backends.PeerError and that peer failed by itself: a peer that closed
// its communicator or stopped on purpose after its own failure ("it
// stopped: <its reason>", the tcp backend) is alive and resetting, so it is
// not named. ranks maps set ranks to global ranks when the error does not
// carry the global rank.
func PeerCulprit(err error, ranks []int) (int, bool) {
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
			k.id, Scope, key, k.timeout, k.grace, err)
	}
	return elasticproto.ParseAssignment(epoch, v)
}

// Shutdown closes the current world (its pending ops fail); the next Init
// joins the next world.
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

// CheckHostUpdates is Horovod's state.check_host_updates() on w, a
// collective over its global set: rank 0 reads elastic/hosts_updated and
// broadcasts (previous seq, newest seq, flags); when the seq grew and the
// driver has published a newer world than this one, every rank returns
// updated true with the flags (Horovod's HostUpdateResult: 1 removed, 2
// added, 3 both). An update already reflected by the current world (the
// driver writes assign.<N> before hosts_updated) does not interrupt.
func (k *Worker) CheckHostUpdates(w World) (flags int, updated bool, err error) {
	k.mu.Lock()
	prev, epoch := k.lastSeq, k.epoch
	k.mu.Unlock()
	msg := []int64{prev, prev, 0}
	if w.Rank() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), k.base.Timeout)
		seq, flags, ok, err := k.HostsUpdated(ctx)
		if err == nil && ok && seq > prev {
			if cur, cok, cerr := k.readEpoch(ctx); cerr == nil && cok && cur > epoch {
				msg = []int64{prev, seq, int64(flags)}
			} else {
				msg = []int64{seq, seq, 0} // reflected by this world already
			}
		} else if err != nil {
			// Every rank waits for the broadcast: answer "no update".
			w.Logf("hvd: elastic: reading elastic/hosts_updated: %v", err)
		}
		cancel()
	}
	if err := w.Broadcast(msg, "hvd.elastic.check_host_updates"); err != nil {
		return 0, false, err
	}
	k.mu.Lock()
	k.lastSeq = max(k.lastSeq, msg[1])
	k.mu.Unlock()
	return int(msg[2]), msg[1] > msg[0], nil
}

// unprefixed is err's message without the "hvd: " its text usually starts
// with, for a line that starts with "hvd: elastic: " (no doubled prefix).
func unprefixed(err error) string { return strings.TrimPrefix(err.Error(), "hvd: ") }
