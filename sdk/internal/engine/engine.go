// engine.go: the engine's types — ops and handles, the Config a set's
// engine is built from (its two planes, the knobs), and the Engine's state.

package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// Errors delivered through handles.
var (
	// ErrMismatch: the coordinator found that ranks disagree on a tensor
	// (dtype, shape, op, scales, root, or an op not allowed with Join).
	ErrMismatch = errors.New("hvd: ranks disagree")
	// ErrShutdown: the engine stopped before the op completed.
	ErrShutdown = errors.New("hvd: the process set's engine has been shut down")
	// ErrStalled: the stall inspector gave up waiting for ranks.
	ErrStalled = errors.New("hvd: stalled")
)

// Tensor is a dense tensor (see sdk.Tensor). Device says where Data lives
// (the zero value: host memory); the engine refuses, at Enqueue, a tensor
// its data plane does not declare it can move.
type Tensor struct {
	Data   []byte
	DType  backends.DType
	Shape  []int64
	Device backends.Device
}

// Op is one enqueued collective. The caller fills the request fields; the
// engine fills the Handle.
type Op struct {
	Type      OpType
	Name      string // full, unique while in flight on this set
	In        Tensor
	Out       Tensor // allreduce/broadcast: destination (may alias In); else set by the engine
	ReduceOp  ReduceOp
	Prescale  float64
	Postscale float64
	Root      int // set rank
	Splits    []int32
	Group     string
	GroupSize int
	// Priority: among the tensors ready in a round, higher ones are
	// negotiated, fused and executed first (Request.Priority).
	Priority int32

	h   Handle
	req Request // what was negotiated (kept for the response cache)
	// UnixNano of Enqueue and of the round that first took it, stamped
	// only with a Config.Meter (meter.go).
	enqAt, pickAt int64
}

// Handle is the result of an Op. Wait and Poll are safe from any goroutine.
type Handle struct {
	e          *Engine
	done       chan struct{}
	bell       atomic.Uint32 // 1 once done is closed (WaitKernel sleeps on it)
	sleepers   atomic.Int32  // goroutines in WaitKernel's kernel sleep
	err        error
	Out        Tensor
	RecvSplits []int32
	LastJoined int // set rank, for Join
}

// Handle returns the op's handle (valid after Enqueue).
func (o *Op) Handle() *Handle { return &o.h }

// Wait blocks until the op completed and returns its error. (It does not
// spin: the engine goroutine does, and two spinning threads per process
// starve each other on small machines.)
func (h *Handle) Wait() error {
	<-h.done
	return h.err
}

// finish completes the op: closes done and wakes WaitKernel. It comes
// after h.err and the outputs are set.
func (h *Handle) finish() {
	close(h.done)
	h.bell.Store(1)
	if h.sleepers.Load() > 0 {
		kernelWake(&h.bell)
	}
}

// finishIn is finish for an op completed in a round of e: a kernel
// sleeper's wake-up is left to the end of the round (flushWakes), so that
// a woken caller sharing this thread's core does not take the processor
// while the round still has ops to complete.
func (h *Handle) finishIn(e *Engine) {
	close(h.done)
	h.bell.Store(1)
	if h.sleepers.Load() > 0 {
		e.wakes = append(e.wakes, &h.bell)
	}
}

// flushWakes wakes the kernel sleepers of the ops the last round
// completed (the holder of drv).
func (e *Engine) flushWakes() {
	for i, b := range e.wakes {
		kernelWakeBlocking(b)
		e.wakes[i] = nil
	}
	e.wakes = e.wakes[:0]
}

// WaitBlocking is Wait for a goroutine locked to a C caller's thread
// when the runtime has one processor: it sleeps in the kernel through the
// scheduler's syscall path, leaving the processor to the engine's thread
// (which takes it back without the runtime's monitor), and the round that
// completes the op wakes it with one futex wake once the round is over.
// Parked instead, its wake-up needs the processor handed to its thread:
// the monitor's retake, tens to hundreds of µs on these VMs (issue 27).
func (h *Handle) WaitBlocking() error {
	if haveKernelWait && h.bell.Load() == 0 {
		h.sleepers.Add(1)
		for h.bell.Load() == 0 {
			kernelSleepBlocking(&h.bell, time.Second)
		}
		h.sleepers.Add(-1)
	}
	<-h.done
	return h.err
}

// WaitKernel is Wait for a goroutine locked to a C caller's thread
// (cmd/libhvd). Parking such a goroutine and waking it through the Go
// scheduler costs several thread hand-offs (tens of µs per op on these
// VMs); instead it first sleeps in the kernel, up to limit, on a word
// finish rings, keeping its thread and processor, so that its wake-up is
// one futex wake. Past limit (a long op) it waits as Wait does: the
// processor it holds meanwhile delays a garbage collection's
// stop-the-world by as much, so limit stays short.
func (h *Handle) WaitKernel(limit time.Duration) error {
	if haveKernelWait && h.bell.Load() == 0 && limit > 0 {
		// finish stores the bell, then reads sleepers; this adds to
		// sleepers, then reads the bell: one of the two sees the other.
		h.sleepers.Add(1)
		deadline := time.Now().Add(limit)
		for h.bell.Load() == 0 {
			left := time.Until(deadline)
			if left <= 0 {
				kernelWaitTimeouts.Add(1)
				break
			}
			kernelSleep(&h.bell, left)
		}
		h.sleepers.Add(-1)
	}
	<-h.done
	return h.err
}

// kernelWaitTimeouts counts WaitKernel sleeps that reached their limit
// before the op completed.
var kernelWaitTimeouts atomic.Int64

// KernelWaitTimeouts reports how many WaitKernel sleeps reached their
// limit before the op completed, since the process started: a caller whose
// sleep holds the processor the engine needs reaches it every time.
func KernelWaitTimeouts() int64 { return kernelWaitTimeouts.Load() }

// WaitDriving is Wait for a caller whose goroutine is locked to its OS
// thread (a C caller through libhvd): while the engine goroutine is only
// polling for work (not asleep in the control plane's Idle, not in a
// round), the caller runs the engine's rounds itself until its op
// completes (Engine.drive), instead of sleeping until the engine goroutine
// completes the op and wakes its thread — a hand-off that costs such a
// caller two thread wake-ups (tens of µs each on small VMs). A Go caller
// gains nothing: the engine goroutine hands it the op's completion on its
// own thread (spinForWork), so it uses Wait.
func (h *Handle) WaitDriving() error {
	if h.e != nil {
		h.e.drive(h)
	}
	<-h.done
	return h.err
}

// Poll reports whether the op completed, without blocking.
func (h *Handle) Poll() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// Done is closed when the op completes.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Config describes one process set's engine.
type Config struct {
	// Data carries the tensors (collectives, and Adasum's point-to-point
	// exchanges); Control carries the negotiation (status exchange, gather
	// to and broadcast from set rank 0, idle/wake). They may be one object
	// (tcp, shm, hier) or a data plane paired with the host transport's
	// control plane (backends.Pair). Both must number the members alike;
	// the engine owns them (Close closes both).
	Data        backends.DataPlane
	Control     backends.ControlPlane
	SetID       int
	GlobalRanks []int // set rank → global rank
	// FusionThreshold in bytes (HOROVOD_FUSION_THRESHOLD); 0 disables fusion.
	FusionThreshold int64
	// StallWarning: the coordinator logs tensors some ranks have not
	// submitted for this long (0 disables); StallShutdown (≥ StallWarning)
	// fails every pending op after this long (0: never).
	StallWarning, StallShutdown time.Duration
	Logf                        func(format string, args ...any)
	// Timeline is where the engine records its phases; it may be switched
	// at runtime (HOROVOD_TIMELINE=DYNAMIC). nil or holding nil: none.
	Timeline *atomic.Pointer[timeline.Timeline]
	Library  string // the data plane's timeline label (backends.Backend.Label), e.g. "TCP"
	// Spin is how long the engine goroutine busy-polls for work before
	// sleeping (0 when ranks outnumber cores; see tcp.DefaultSpin).
	Spin time.Duration
	// CacheCapacity is the response cache size (HOROVOD_CACHE_CAPACITY);
	// 0 disables the cache. Must be the same on every member.
	CacheCapacity int
	// CycleTime (HOROVOD_CYCLE_TIME) is the least time between two rounds
	// this rank starts with work of its own: ops enqueued meanwhile wait and
	// are negotiated (and fused) together. 0: a round starts at once. A
	// round a peer starts is joined at once when this rank has no work.
	CycleTime time.Duration
	// Params, when set, holds the process's current settings (shared by
	// its engines): what this engine publishes as set rank 0 (see
	// autotune.go); the global set's engine stores there what it adopts.
	// nil: this Config's own FusionThreshold and CycleTime. Whatever a
	// rank publishes, every member uses set rank 0's fusion threshold, so
	// the engine's copy of FusionThreshold (and, under a tuner, CycleTime)
	// follows rank 0's from round to round.
	Params *atomic.Pointer[Params]
	// Tuner, on the global set's engine of global rank 0 only, is the
	// autotuner (HOROVOD_AUTOTUNE): fed every round, it stores new
	// settings in Params.
	Tuner *Tuner
	// Heartbeat: while ops of this rank wait for other ranks, an empty
	// round every Heartbeat checks that the peers are still there (see
	// heartbeatIn). 0 disables it.
	Heartbeat time.Duration
	// CallerRounds (HVD_CALLER_ROUNDS, experimental): over a control plane
	// whose Idle is shared (backends.SharedIdler), the engine goroutine
	// sleeps without the right to run rounds, so that a caller waiting
	// with drive runs them on its own thread (Handle.WaitDriving, TryHold).
	CallerRounds bool
	// Meter, when set, counts ops, bytes and phase times for the job's
	// metrics (meter.go); nil costs nothing.
	Meter *Meter
}

// Engine runs one process set's negotiation and execution on its own
// goroutine, so a slow set never holds up another.
type Engine struct {
	cfg       Config
	data      backends.DataPlane
	control   backends.ControlPlane
	memory    []backends.MemoryKind // what data declares it moves
	rank, n   int
	coord     *Coordinator
	lastStall time.Time // the stall inspector's last check
	lastWarn  time.Time // and its last warning

	cache     *Cache
	waiting   []Request        // cached locally, not yet ready everywhere (engine goroutine only)
	xstatus   statusBuffers    // exchangeStatus's, reused from round to round (the round's runner only)
	roundReqs []Request        // the requests a round takes, reused likewise
	wakes     []*atomic.Uint32 // kernel sleepers of the ops the running round completed (finishIn)

	mu     sync.Mutex
	table  map[string]*Op
	queue  []Request
	joins  []*Op
	err    error // set once the engine stops: every later enqueue fails with it
	retire error // if set, the reason given to pending ops whatever stops the engine
	closed bool

	// drv is held by whoever runs the loop's steps — the engine goroutine,
	// or a caller of Wait that found it only polling for work (drive) —
	// so that the state below it (waiting, cache, coord, fusion, lastRound,
	// lastStall, the planes) has one user at a time.
	drv       sync.Mutex
	wantDrive atomic.Int32 // callers trying to take drv (spinForWork lets go of it)
	polling   atomic.Bool  // the engine goroutine is in spinForWork (a caller may take drv)
	// held: a caller holds drv (TryHold, drive): it runs the rounds of what
	// is enqueued meanwhile, so Enqueue does not wake the engine goroutine
	// (letGo wakes it for what the caller leaves queued).
	held atomic.Bool
	// sharedIdle: the control plane's Idle may run beside the rounds
	// (backends.SharedIdler) and Config.CallerRounds asks for it: the engine
	// goroutine sleeps in it without drv, so that a waiting caller can take
	// drv and run the round itself.
	sharedIdle bool

	fusion    []byte
	own       Params                 // this rank's configured settings (New)
	inForce   atomic.Pointer[Params] // set rank 0's, as of the last round (adopt)
	done      chan struct{}
	quit      chan struct{} // closed by Close: cuts a cycle-time pause short
	quitOnce  sync.Once
	lastRound time.Time

	// What the engine goroutine is doing, for Activity: the response being
	// executed, or nil while it negotiates or idles (busy tells apart).
	running atomic.Pointer[Response]
	busy    atomic.Bool

	stats struct {
		rounds, negotiations, sent, cached, driven atomic.Uint64
		// phase times (ns), summed over rounds: see Stats
		pickup, status, negotiate, execute atomic.Int64
	}
	enqAt  atomic.Int64 // UnixNano of the enqueue that made the queue non-empty (0: none pending)
	queued atomic.Bool  // queue non-empty (read while spinning, without the lock)
	halted atomic.Bool  // closed or stopped (e.closed or e.err set; read without the lock)

	// The response being executed and when it started, for the Meter
	// (meter.go; whoever holds drv).
	metered []*Op
	meterAt int64
}

// Stats counts the engine's work since it started.
type Stats struct {
	Rounds       uint64 // negotiation rounds
	Negotiations uint64 // rounds that went through the coordinator
	SentRequests uint64 // requests this rank sent to the coordinator
	CachedOps    uint64 // responses executed straight from the response cache
	CallerRounds uint64 // rounds run by a waiting caller instead of the engine goroutine
	// Where the time goes, summed over rounds (a profile: divide by the
	// ops of a benchmark for a per-op figure). Pickup: from the enqueue
	// that found the queue empty to the start of the round that took it
	// (the engine goroutine's wake-up, or the pacing); Status: the status
	// exchange (with the wait for the other ranks to join the round);
	// Negotiate: the gather to the coordinator and the broadcast back (0
	// for rounds served from the response cache); Execute: the collectives,
	// fusion copies and completions. What a caller measures beyond their
	// sum is its own enqueue and the hand-off of the completion back to it.
	Pickup, Status, Negotiate, Execute time.Duration
}

// Stats returns the counters (safe from any goroutine).
func (e *Engine) Stats() Stats {
	return Stats{e.stats.rounds.Load(), e.stats.negotiations.Load(), e.stats.sent.Load(), e.stats.cached.Load(), e.stats.driven.Load(),
		time.Duration(e.stats.pickup.Load()), time.Duration(e.stats.status.Load()),
		time.Duration(e.stats.negotiate.Load()), time.Duration(e.stats.execute.Load())}
}
