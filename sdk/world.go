// Package sdk is hvd's public Go API: Init, process sets and Horovod's
// collectives (allreduce, allgather, broadcast, alltoall, reducescatter,
// barrier, send/recv) with Horovod's semantics, over the data plane in
// package backends.
//
// A World is one rank's view of a job: its identity (rank, size, local and
// cross ranks, computed after rendezvous), its process sets and, for each
// set it belongs to, two communicators (the engine's planes, and a second
// mesh for send/recv and direct use) with one engine. The package-level Init,
// Shutdown and Current manage a process-wide World as Horovod's hvd.init()
// does; Start gives an independent World (several in one process run ranks
// as goroutines in tests).
//
// Its parts, below it: sdk/internal/wiring builds a world's store (with the
// MPI bootstrap as an explicit dependency) and each set's communicators
// through the backend registry; sdk/internal/engine runs a set's
// negotiation and collectives; sdk/elastic is the elastic worker's protocol
// with hvdrun's driver (Worker, Run and State here are its public API);
// sdk/rendezvous is the store and the launch contract.
package sdk

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/cpubind"
	"github.com/hvdorg/hvd/sdk/internal/engine"
	"github.com/hvdorg/hvd/sdk/internal/timeline"
	"github.com/hvdorg/hvd/sdk/internal/wiring"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// Config configures Start/Init. The zero value reads everything from the
// environment the launcher set (see sdk/rendezvous/IDENTITY.md).
type Config struct {
	// ProcessSets are the static process sets to register, in order: they
	// get ids 1, 2, … Every rank must pass the same list in the same order
	// (checked: a mismatch fails Init on every rank).
	ProcessSets [][]int
	// Getenv reads the launch environment; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// Identity, when set, replaces detection from the environment.
	Identity *rendezvous.Identity
	// Store, when set, replaces the rendezvous store (tests run several
	// ranks in one process on a shared backends.MemStore).
	Store backends.Store
	// Generation tells apart successive Inits of one job in the same
	// processes (shutdown, then init again): their store keys must not
	// meet. Every rank must pass the same value; package-level Init counts
	// its own calls.
	Generation int
	// HostKey, when set, replaces the host identity used to compute local
	// and cross ranks (tests fake several hosts in one machine).
	HostKey string
	// Backend names the data plane: "auto" (default: shared memory inside
	// a host, TCP across), "shm" or "tcp"; also HVD_BACKEND. See backend.go.
	Backend string
	// Dynamic allows AddProcessSet/RemoveProcessSet after Start (also
	// HOROVOD_DYNAMIC_PROCESS_SETS set to a non-zero integer).
	Dynamic bool
	// Logf receives warnings (stall inspector); nil writes to stderr.
	Logf func(format string, args ...any)
	// SetSpecs are more static process sets, registered after ProcessSets:
	// fixed ranks or a function of the world size, re-registered after
	// every elastic reset (setspecs.go, docs/elastic.md).
	SetSpecs []SetSpec
	// ElasticStore, when set, replaces the job store's "elastic" scope for
	// an elastic worker (tests play the driver with it; elastic.go).
	ElasticStore ElasticStore

	// Set by an elastic Worker (elastic.go): the registry that outlives
	// this World, rank 0's sets adopted, and the wait for peers.
	specs       *setRegistry
	elastic     bool
	joinTimeout time.Duration
}

// World is one rank's membership in a job. Its methods are safe for
// concurrent use; collectives on one process set are serialised.
type World struct {
	id     rendezvous.Identity
	topo   rendezvous.Topology
	store  backends.Store
	server *rendezvous.Server
	client *rendezvous.Client
	cfg    Config
	spin   time.Duration

	backend string          // auto or a registered backend's name (backend.go)
	wire    *wiring.Builder // connects the sets' communicators (sdk/internal/wiring)

	knobs    knobs
	timeline atomic.Pointer[timeline.Timeline] // global rank 0 only
	tune     autotune                          // HOROVOD_AUTOTUNE (autotune.go)
	tlMu     sync.Mutex
	logf     func(format string, args ...any)

	dynamic bool
	dynMu   sync.Mutex   // serialises add/remove
	dynSeq  atomic.Int64 // names of the agreement allgathers
	reg     *setRegistry // process set specs, ids and free ids (setspecs.go)

	metrics *metrics // HVD_METRICS_* (metrics.go); nil when off

	mu     sync.RWMutex
	sets   map[int]*ProcessSet
	order  []int
	closed atomic.Bool
}

// Start joins the job described by cfg (and the environment) and returns
// when every rank has joined, the topology is known, the process sets are
// verified identical on every rank and their communicators are connected.
// It fails within HOROVOD_GLOO_TIMEOUT_SECONDS (default 30 s) if peers do
// not show up.
func Start(ctx context.Context, cfg Config) (*World, error) {
	return start(ctx, cfg, wiring.BuildMPI())
}

// start is Start with this build's MPI (wiring.BuildMPI) passed in.
func start(ctx context.Context, cfg Config, mpi wiring.MPI) (*World, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var id rendezvous.Identity
	if cfg.Identity != nil {
		id = *cfg.Identity
	} else {
		var err error
		if id, err = rendezvous.DetectIdentity(getenv); err != nil {
			return nil, err
		}
	}
	if id.Timeout <= 0 {
		id.Timeout = 30 * time.Second
	}
	k, err := readKnobs(getenv)
	if err != nil {
		return nil, err
	}
	startStackDump(k.stacks)
	if cfg.Backend != "" {
		if k.backend, err = parseBackend(cfg.Backend); err != nil {
			return nil, err
		}
	}
	if k.kernels != "" {
		if err := backends.SetKernels(k.kernels); err != nil {
			return nil, fmt.Errorf("%w: HVD_KERNELS=%s: %v", ErrInvalidArgument, k.kernels, err)
		}
	}
	// Validate the process sets before anything is registered or connected.
	reg := cfg.specs
	if reg == nil {
		reg = newSetRegistry(cfg.ProcessSets, cfg.SetSpecs)
	}
	plan, err := reg.plan(id.Size, !cfg.elastic)
	if err != nil {
		return nil, err
	}
	w := &World{id: id, cfg: cfg, sets: map[int]*ProcessSet{}, backend: k.backend, knobs: k,
		spin: k.spin, dynamic: cfg.Dynamic || k.dynamic, reg: reg}
	w.logf = cfg.Logf
	if w.logf == nil {
		w.logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "[%d] "+format+"\n", append([]any{id.Rank}, args...)...)
		}
	}
	if id.Rank == 0 {
		for _, msg := range k.unsupported {
			w.logf("hvd: %s", msg)
		}
	}
	if w.knobs.timeline != "" && w.knobs.timeline != "DYNAMIC" && id.Rank == 0 {
		tl, err := timeline.Open(w.knobs.timeline, w.knobs.markCycles)
		if err != nil {
			return nil, fmt.Errorf("hvd: HOROVOD_TIMELINE: %w", err)
		}
		w.timeline.Store(tl)
	}
	ok := false
	defer func() {
		if !ok {
			w.shutdownAll()
		}
	}()
	if w.backend == "mpi" && mpi.Ready != nil {
		if err := mpi.Ready(); err != nil {
			return nil, err
		}
	}
	st, err := wiring.ConnectStore(wiring.StoreConfig{ID: &w.id, Given: cfg.Store, Generation: cfg.Generation,
		Timeout: w.joinTimeout(), Backend: w.backend, MPI: mpi})
	w.store, w.server, w.client = st.Store, st.Server, st.Client
	if err != nil {
		return nil, err
	}
	listen, err := wiring.ListenHost(w.id)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, w.joinTimeout())
	defer cancel()
	hostKey := cfg.HostKey
	if hostKey == "" {
		hostKey = rendezvous.HostKey(id.Hostname)
	}
	w.topo, err = rendezvous.ComputeTopology(sctx, w.store, id.Rank, id.Size, hostKey)
	if err != nil {
		return nil, err
	}
	w.id.LocalRank, w.id.LocalSize = w.topo.LocalRank, w.topo.LocalSize
	if k.bindTo != "none" {
		changed, err := cpubind.Bind(k.bindTo, w.topo.LocalRank, w.topo.LocalSize, w.logf)
		if err != nil {
			return nil, err
		}
		if v, _ := getenv("GOMAXPROCS"); changed && UserProcs(v) == 0 {
			// The runtime's processors follow the mask (its default
			// counts the CPUs it may run on): on one CPU the engine and
			// its callers take turns on one thread instead of handing
			// work between two on one core (issue 27: a named 8 B
			// allreduce 7 µs instead of 20–34 µs here); a mask given
			// back restores them.
			runtime.SetDefaultGOMAXPROCS()
		}
	}
	setBallast(k.gcBallast)
	w.id.CrossRank, w.id.CrossSize = w.topo.CrossRank, w.topo.CrossSize
	w.wire = &wiring.Builder{ID: w.id, Topo: w.topo, Store: w.store, Listen: listen, Spin: w.spin,
		Backend: w.backend, MPILaunch: rendezvous.MPILaunched(getenv), Settings: k.backendSettings(),
		OpTimeout: k.opTimeout, Logf: w.logf, Activity: w.activity}

	all := make([]int, id.Size)
	for i := range all {
		all[i] = i
	}
	global, err := w.wire.NewComm(sctx, "ps", 0, 0, all)
	if err != nil {
		return nil, err
	}
	if plan, err = reg.agreePlan(global.Data, id.Rank, plan, cfg.elastic); err != nil {
		global.Close()
		return nil, err
	}
	gc, err := w.connectSet(sctx, 0, 0, all, &global)
	if err != nil {
		return nil, err
	}
	if err := w.register(0, all, gc); err != nil {
		gc.close()
		return nil, err
	}
	if err := w.buildSets(sctx, plan.ids(), plan.lists()); err != nil {
		return nil, err
	}
	for _, msg := range reg.commit(plan, id.Epoch) {
		w.logf("%s", msg)
	}
	w.startMetrics()
	ok = true
	return w, nil
}

// setComms are a member's two meshes for one set: one the engine owns
// (its control and data planes), one for send/recv and direct use.
type setComms struct {
	eng wiring.Mesh
	p2p backends.Communicator
}

func (sc setComms) close() {
	sc.eng.Close()
	if sc.p2p != nil {
		sc.p2p.Close()
	}
}

// connectSet builds both meshes of a set (eng may be given: the global
// set's was built before process-set verification). gen tells apart two
// builds of the same id and ranks (a dynamic set removed and added again):
// their store keys must not meet.
func (w *World) connectSet(ctx context.Context, id int, gen int64, ranks []int, eng *wiring.Mesh) (setComms, error) {
	var sc setComms
	var err error
	if eng != nil {
		sc.eng = *eng
	} else {
		if sc.eng, err = w.wire.NewComm(ctx, "ps", id, gen, ranks); err != nil {
			return sc, err
		}
	}
	p2p, err := w.wire.NewComm(ctx, "p2p", id, gen, ranks)
	if err != nil {
		sc.close()
		return setComms{}, err
	}
	sc.p2p = p2p.Data
	return sc, nil
}

// joinTimeout bounds the wait for peers at Start (an elastic worker waits
// longer: HOROVOD_ELASTIC_TIMEOUT) and every store call.
func (w *World) joinTimeout() time.Duration {
	if w.cfg.joinTimeout > w.id.Timeout {
		return w.cfg.joinTimeout
	}
	return w.id.Timeout
}

// buildSets connects the communicators of sets (ids[i] for sets[i]) that
// this rank belongs to, all at once: a rank in several sets must not wait
// for one set while its peers wait for another.
func (w *World) buildSets(ctx context.Context, ids []int, sets [][]int) error {
	comms := make([]setComms, len(sets))
	errs := make([]error, len(sets))
	var wg sync.WaitGroup
	for i, ranks := range sets {
		if !slices.Contains(ranks, w.id.Rank) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[i], errs[i] = w.connectSet(ctx, ids[i], 0, ranks, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, c := range comms {
				c.close()
			}
			return fmt.Errorf("hvd: process set %d %v: %w", ids[i], sets[i], err)
		}
	}
	for i, ranks := range sets {
		if err := w.register(ids[i], ranks, comms[i]); err != nil {
			for _, c := range comms[i:] {
				c.close()
			}
			return err
		}
	}
	return nil
}

// register makes a set usable: for members it starts the set's engine.
func (w *World) register(id int, ranks []int, sc setComms) error {
	ps := &ProcessSet{w: w, id: id, ranks: ranks, p2p: sc.p2p, setRank: slices.Index(ranks, w.id.Rank)}
	if sc.eng.Data != nil {
		params, tuner := w.tuning(id, sc.eng.Data)
		var err error
		ps.eng, err = engine.New(engine.Config{
			Data: sc.eng.Data, Control: sc.eng.Control, SetID: id, GlobalRanks: ranks, FusionThreshold: w.knobs.fusion,
			StallWarning: w.knobs.stallWarn, StallShutdown: w.knobs.stallShutdown,
			Logf: w.logf, Timeline: &w.timeline, Library: sc.eng.Backend.Label, CacheCapacity: w.knobs.cache,
			CycleTime: w.knobs.cycle, Heartbeat: heartbeat, Params: params, Tuner: tuner,
			Spin: w.engineSpin(), Meter: w.newMeter(), CallerRounds: w.knobs.callerDrive,
		})
		if err != nil {
			return err
		}
	}
	w.mu.Lock()
	w.sets[id] = ps
	w.order = append(w.order, id)
	w.mu.Unlock()
	return nil
}

// Close leaves the job: every communicator is closed and every process set
// handle becomes invalid (calls return ErrNotInitialized). Safe to call more
// than once.
func (w *World) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	w.shutdownAll()
	return nil
}

func (w *World) shutdownAll() {
	w.stopMetrics()
	w.mu.Lock()
	sets := w.sets
	w.sets = map[int]*ProcessSet{}
	w.order = nil
	w.mu.Unlock()
	for _, ps := range sets {
		if ps.eng != nil {
			ps.eng.Close(ErrShutdown)
		}
		if ps.p2p != nil {
			ps.p2p.Close()
		}
	}
	w.closeTuneLog()
	if tl := w.timeline.Swap(nil); tl != nil {
		if err := tl.Close(); err != nil {
			w.logf("hvd: closing the timeline: %v", err)
		}
	}
	if w.client != nil {
		w.client.Close()
	}
	if w.server != nil {
		// Let peers finish reading keys before the store goes away.
		w.server.Close()
	}
}

func (w *World) alive() error {
	if w == nil || w.closed.Load() {
		return ErrNotInitialized
	}
	return nil
}

// Rank is this process's global rank.
func (w *World) Rank() int { return w.id.Rank }

// Size is the number of ranks in the job.
func (w *World) Size() int { return w.id.Size }

// LocalRank is this rank's index among the ranks on its host.
func (w *World) LocalRank() int { return w.id.LocalRank }

// LocalSize is the number of ranks on this host.
func (w *World) LocalSize() int { return w.id.LocalSize }

// CrossRank is this host's index among hosts that have this local rank.
func (w *World) CrossRank() int { return w.id.CrossRank }

// CrossSize is the number of hosts that have this local rank.
func (w *World) CrossSize() int { return w.id.CrossSize }

// IsHomogeneous reports whether every host runs the same number of ranks.
func (w *World) IsHomogeneous() bool { return w.topo.Homogeneous }

// Hostname is the host name this rank reports.
func (w *World) Hostname() string { return w.id.Hostname }

// Identity returns the identity as detected and completed by rendezvous.
func (w *World) Identity() rendezvous.Identity { return w.id }

// GlobalProcessSet returns the set of all ranks (id 0).
func (w *World) GlobalProcessSet() *ProcessSet {
	ps, _ := w.ProcessSet(0)
	return ps
}

// ProcessSet returns the registered set with this id.
func (w *World) ProcessSet(id int) (*ProcessSet, error) {
	if err := w.alive(); err != nil {
		return nil, err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	ps, ok := w.sets[id]
	if !ok {
		if err := w.reg.goneErr(id); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w (id %d)", ErrUnknownSet, id)
	}
	return ps, nil
}

// ProcessSets returns every registered set in registration order.
func (w *World) ProcessSets() []*ProcessSet {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]*ProcessSet, 0, len(w.order))
	for _, id := range w.order {
		out = append(out, w.sets[id])
	}
	return out
}

// FindProcessSet returns the registered set with exactly these ranks (in
// any order).
func (w *World) FindProcessSet(ranks []int) (*ProcessSet, error) {
	key := slices.Clone(ranks)
	slices.Sort(key)
	for _, ps := range w.ProcessSets() {
		if slices.Equal(ps.ranks, key) {
			return ps, nil
		}
	}
	return nil, fmt.Errorf("%w: no process set has ranks %v", ErrUnknownSet, ranks)
}

// Join tells the global process set that this rank has no more work (for
// example, it ran out of data). Until every rank has joined, the other
// ranks' allreduces complete with this rank contributing zeros (Average
// still divides by the full size); other collectives fail while a rank is
// joined. Join blocks until every rank has joined and returns the global
// rank that joined last, the same on every rank.
//
// A completed join restarts the global set's automatic names on every rank
// ("<op>.noname.1" next): a rank that joined early skipped the ops the
// others ran meanwhile (each consuming an automatic name), so without the
// restart their unnamed ops after the join would carry different names and
// wait for each other forever. Every op of the set submitted before the
// join has completed or failed by then, so no name in flight is reused.
func (w *World) Join() (int, error) {
	ps := w.GlobalProcessSet()
	if ps == nil {
		return -1, ErrNotInitialized
	}
	h, err := ps.enqueue("join", &engine.Op{Type: engine.Join, Name: "join.noname"})
	if err != nil {
		return -1, err
	}
	if _, err := h.Wait(); err != nil {
		return -1, err
	}
	ps.counter.Store(0)
	return ps.ranks[h.ops[0].Handle().LastJoined], nil
}

// activity says what set's engine is doing ("" when unknown): the stall
// notices of its communicators name it (wiring.Builder.Activity).
func (w *World) activity(set int) string {
	w.mu.RLock()
	ps := w.sets[set]
	w.mu.RUnlock()
	if ps != nil && ps.eng != nil {
		return ps.eng.Activity()
	}
	return ""
}

// engineSpin is the engine's busy-poll budget: HVD_SPIN_US when set, else
// backends.DefaultSpin for this host's rank count.
func (w *World) engineSpin() time.Duration {
	if w.spin >= 0 {
		return w.spin
	}
	return backends.DefaultSpin(w.topo.LocalSize)
}

// StartTimeline starts writing a timeline to path at runtime (global rank 0
// writes; other ranks do nothing). As in Horovod it needs
// HOROVOD_TIMELINE=DYNAMIC; a timeline already running is closed first.
func (w *World) StartTimeline(path string, markCycles bool) error {
	if err := w.alive(); err != nil {
		return err
	}
	if w.knobs.timeline != "DYNAMIC" {
		return fmt.Errorf("%w: Set HOROVOD_TIMELINE=DYNAMIC to start and stop the timeline at runtime", ErrInvalidArgument)
	}
	if w.id.Rank != 0 {
		return nil
	}
	w.tlMu.Lock()
	defer w.tlMu.Unlock()
	tl, err := timeline.Open(path, markCycles)
	if err != nil {
		return fmt.Errorf("hvd: start_timeline: %w", err)
	}
	if old := w.timeline.Swap(tl); old != nil {
		return old.Close()
	}
	return nil
}

// StopTimeline stops a timeline started with StartTimeline and closes its
// file (a valid JSON array).
func (w *World) StopTimeline() error {
	if w.knobs.timeline != "DYNAMIC" {
		return fmt.Errorf("%w: Set HOROVOD_TIMELINE=DYNAMIC to start and stop the timeline at runtime", ErrInvalidArgument)
	}
	w.tlMu.Lock()
	defer w.tlMu.Unlock()
	if old := w.timeline.Swap(nil); old != nil {
		return old.Close()
	}
	return nil
}

// heartbeat is how often an engine whose ops wait for other ranks checks,
// with an empty round, that they are still there (engine.Config.Heartbeat):
// a stopped rank is then found within this plus HOROVOD_GLOO_TIMEOUT_SECONDS.
const heartbeat = 5 * time.Second
