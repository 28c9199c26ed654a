// loop.go: the engine's lifecycle and loop. New starts one goroutine per
// process set; Enqueue hands it ops (never blocking on the network); the
// loop spins briefly, then sleeps in the control plane's Idle until this
// rank enqueues (Kick) or a peer starts a round, paces rounds
// (CycleTime), runs them (round.go) and the stall inspector (stall.go);
// Close, Retire and a peer failure stop it and fail whatever is pending.

package engine

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// New starts the engine's goroutine over cfg.Data and cfg.Control.
func New(cfg Config) (*Engine, error) {
	if cfg.Data == nil || cfg.Control == nil {
		return nil, fmt.Errorf("%w: the engine needs a data plane and a control plane", backends.ErrInvalidArgument)
	}
	if cfg.Data.Rank() != cfg.Control.Rank() || cfg.Data.Size() != cfg.Control.Size() {
		return nil, fmt.Errorf("%w: process set %d: the data plane is rank %d of %d, the control plane rank %d of %d",
			backends.ErrInvalidArgument, cfg.SetID, cfg.Data.Rank(), cfg.Data.Size(), cfg.Control.Rank(), cfg.Control.Size())
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e := &Engine{cfg: cfg, data: cfg.Data, control: cfg.Control, memory: cfg.Data.Memory(), rank: cfg.Data.Rank(), n: cfg.Data.Size(),
		table: map[string]*Op{}, done: make(chan struct{}), quit: make(chan struct{}), lastStall: time.Now(), cache: NewCache(cfg.CacheCapacity),
		own: ownParams(cfg)}
	if e.rank == 0 {
		e.coord = NewCoordinator(e.n, cfg.GlobalRanks)
	}
	if si, ok := cfg.Control.(backends.SharedIdler); ok && si.IdleShared() && cfg.CallerRounds {
		e.sharedIdle = true
	}
	go e.loop()
	return e, nil
}

// Enqueue submits ops atomically: either every op is accepted or none is
// (a name already in flight on this set is an error). It never blocks on
// the network.
func (e *Engine) Enqueue(ops ...*Op) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	seen := map[string]bool{}
	for _, o := range ops {
		if o.Type == Join {
			continue
		}
		if _, dup := e.table[o.Name]; dup || seen[o.Name] {
			return fmt.Errorf("%w: a tensor named %q is already in flight on process set %d; names must be unique until their op completes",
				backends.ErrInvalidArgument, o.Name, e.cfg.SetID)
		}
		seen[o.Name] = true
		for _, t := range []*Tensor{&o.In, &o.Out} {
			if !backends.Declares(e.memory, t.Device) {
				return fmt.Errorf("%w: process set %d: tensor %q is in %v memory, which the set's data plane (%s) cannot move (it takes %v)",
					backends.ErrUnsupported, e.cfg.SetID, o.Name, t.Device, e.cfg.Library, e.memory)
			}
		}
	}
	for _, o := range ops {
		o.h = Handle{e: e, done: make(chan struct{})}
		if o.Type == Join {
			e.joins = append(e.joins, o)
		} else {
			e.table[o.Name] = o
		}
		o.req = Request{Type: o.Type, DType: o.In.DType, Name: o.Name, Shape: o.In.Shape,
			ReduceOp: o.ReduceOp, Prescale: o.Prescale, Postscale: o.Postscale, Root: int32(o.Root),
			Group: o.Group, GroupSize: int32(o.GroupSize), Priority: o.Priority}
		e.queue = append(e.queue, o.req)
		if e.cfg.Meter != nil {
			o.enqAt = nanotime()
		}
		e.tl().NegotiateStart(o.Name, o.Type.String())
	}
	if len(e.queue) == len(ops) { // the queue was empty: the pickup clock starts
		e.enqAt.Store(time.Now().UnixNano())
	}
	e.queued.Store(true)
	if !e.held.Load() { // a caller holding drv runs the round (letGo kicks for what it leaves)
		e.control.Kick()
	}
	return nil
}

// closePlanes closes both planes (peers blocked on this rank fail).
func (e *Engine) closePlanes() {
	e.data.Close()
	e.control.Close()
}

// Close stops the engine: both planes are closed, and every pending op
// fails with err (ErrShutdown when nil). It waits for the goroutine to exit.
func (e *Engine) Close(err error) {
	if err == nil {
		err = ErrShutdown
	}
	e.mu.Lock()
	if e.err == nil {
		e.err = err
		if e.retire != nil {
			e.err = e.retire
		}
	}
	e.closed = true
	e.halted.Store(true)
	e.mu.Unlock()
	e.quitOnce.Do(func() { close(e.quit) })
	e.closePlanes()
	<-e.done
	e.failAll(e.err)
}

// Retire records why the engine is about to be closed (the set is being
// removed): from now on, whatever stops it — Close, or peers closing their
// side first — pending ops fail with err.
func (e *Engine) Retire(err error) {
	e.mu.Lock()
	e.retire = err
	e.mu.Unlock()
}

// Err returns the error that stopped the engine, or nil while it runs.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *Engine) loop() {
	defer close(e.done)
	rested := false // woke from Idle after a caller's rounds: no spin before sleeping again
	// The engine spins for work only when work is likely within the spin
	// (issue 27): while an op of this rank is in flight (its caller waits,
	// most likely asleep, so the core is free, and the peers' round is
	// near), after a round a peer started (this rank's own op is then
	// near), or unless the last idles with nothing in flight each lasted
	// longer than the spin. A training step (a round per few hundred µs of
	// compute) then sleeps at once after its rounds, instead of taking the
	// core from its framework thread (a bound rank's only core) for the
	// spin; back-to-back ops keep spinning.
	var idleSince time.Time // when the loop last ran out of work (zero while it has some)
	idleEmpty := false      // and whether it counts (nothing in flight, not after a peer's round)
	longIdles, peerLed := 0, false
	for {
		e.drv.Lock()
		e.mu.Lock()
		hasNew, over := len(e.queue) > 0, e.closed || e.err != nil
		inFlight := len(e.table) > 0 || len(e.joins) > 0
		e.mu.Unlock()
		if over {
			e.drv.Unlock()
			return
		}
		if !hasNew && idleSince.IsZero() {
			// Not counted: an idle with an op in flight, or after a round a
			// peer started (this rank's op is then expected soon: that is
			// why the engine spins there).
			idleSince, idleEmpty = time.Now(), !inFlight && !peerLed
		}
		if !hasNew && e.cfg.Spin > 0 && !rested && (inFlight || peerLed || longIdles < spinSkipAfter) {
			hasNew = e.spinForWork() // may let a waiting caller drive meanwhile
			e.mu.Lock()
			over = e.closed || e.err != nil
			e.mu.Unlock()
			if over {
				e.drv.Unlock()
				return
			}
		}
		if !hasNew {
			timeout := time.Duration(-1)
			if e.coord != nil && e.cfg.StallWarning > 0 && len(e.coord.order) > 0 { // something can stall
				timeout = max(time.Until(e.lastStall.Add(stallEvery(e.cfg.StallWarning))), time.Millisecond)
			}
			if beat := e.heartbeatIn(); beat >= 0 && (timeout < 0 || beat < timeout) {
				timeout = beat
			}
			rested = false
			var incoming bool
			var err error
			if e.sharedIdle {
				// Sleep without drv: a caller waiting for its op may take
				// it meanwhile and run the round on its own thread
				// (driveHeld). Its rounds move what Idle reads, so after
				// any, look again instead of trusting what Idle said.
				gen := e.stats.driven.Load()
				e.drv.Unlock()
				incoming, err = e.control.Idle(timeout)
				e.drv.Lock()
				if err == nil && e.stats.driven.Load() != gen {
					e.drv.Unlock()
					rested = true
					continue
				}
			} else {
				incoming, err = e.control.Idle(timeout)
			}
			if err != nil {
				// A peer left or died while this rank idled. Close this rank's
				// side too, so that members already waiting on it (in a round
				// it will never join) fail at once instead of after the
				// timeout; members that do not need it finish their op.
				e.closePlanes()
				e.stop(err)
				e.drv.Unlock()
				return
			}
			if !incoming {
				if err := e.stallCheck(); err != nil {
					e.closePlanes() // the peers see this rank leave and fail too
					e.stop(err)
					e.drv.Unlock()
					return
				}
				if e.heartbeatIn() != 0 {
					e.drv.Unlock()
					continue
				}
				// Heartbeat due: an empty round (below) probes every member.
			}
		}
		// An idle is measured to the work's arrival (an enqueue's time, else
		// now: a peer's round), not to when this goroutine got to run: under
		// one processor a caller enqueuing a batch holds it meanwhile.
		enq := e.enqAt.Load()
		if !idleSince.IsZero() {
			if idleEmpty {
				arrived := time.Now()
				if enq != 0 && enq > idleSince.UnixNano() {
					arrived = time.Unix(0, enq)
				}
				if arrived.Sub(idleSince) > longIdle*e.cfg.Spin {
					longIdles++
				} else {
					longIdles = 0
				}
			}
			idleSince = time.Time{}
		}
		peerLed = enq == 0 && !inFlight
		ok := e.step()
		e.drv.Unlock()
		if !ok {
			return
		}
	}
}

// step runs one round (paced by CycleTime) and the stall inspector; on an
// error it stops the engine and returns false. The caller holds e.drv.
func (e *Engine) step() bool {
	e.pace()
	e.meterPicked()
	e.tl().MarkCycleStart()
	e.busy.Store(true)
	err := e.round()
	e.flushWakes()
	e.running.Store(nil)
	e.busy.Store(false)
	if err != nil {
		e.stop(err)
		return false
	}
	if err := e.stallCheck(); err != nil {
		e.closePlanes()
		e.stop(err)
		return false
	}
	return true
}

// drive runs the engine's rounds on the calling goroutine until h
// completes, as long as there is work for a round (an op of this rank
// queued, or a peer starting one) and the engine goroutine is not itself
// busy or asleep in Idle (e.drv is free only while it polls for work).
// Otherwise it returns and the caller sleeps on h as before; it never
// blocks on e.drv, so it cannot hang where waiting on h would not.
func (e *Engine) drive(h *Handle) {
	if !h.Poll() && e.takeDrive() {
		e.driveHeld(h)
	}
}

// takeDrive takes e.drv for a caller if the engine goroutine is only
// polling for work: it announces itself (wantDrive), which makes
// spinForWork let go of e.drv between polls, and tries for a few µs. It
// never blocks on e.drv (the engine goroutine may be asleep in Idle with
// it). Only announced callers make the engine goroutine let go: releasing
// and retaking the lock on every poll costs the engine goroutine wake-ups
// when nobody wants it (measured: 1.5× the context switches of a batch of
// async ops).
//
// It busy-waits (at most 20 µs), without yielding: for a caller locked to its thread
// (libhvd's), every runtime.Gosched is a hand-off to another thread and
// back, the very cost driving avoids. And it does not try at all while
// the engine goroutine is not polling (asleep in Idle, in a round, or
// never spinning because ranks outnumber cores).
func (e *Engine) takeDrive() bool {
	if e.tryHold() {
		return true
	}
	if !e.polling.Load() {
		return false
	}
	e.wantDrive.Add(1)
	defer e.wantDrive.Add(-1)
	deadline := time.Now().Add(20 * time.Microsecond)
	for e.polling.Load() && time.Now().Before(deadline) {
		if e.tryHold() {
			return true
		}
	}
	return e.tryHold()
}

// tryHold takes drv for a caller without blocking.
func (e *Engine) tryHold() bool {
	if !e.drv.TryLock() {
		return false
	}
	e.held.Store(true)
	return true
}

// letGo gives back drv a caller held, and wakes the engine goroutine for
// whatever was enqueued meanwhile and not run (Enqueue did not wake it).
func (e *Engine) letGo() {
	e.held.Store(false)
	e.drv.Unlock()
	if e.queued.Load() {
		e.control.Kick()
	}
}

// TryHold takes the right to run the engine's rounds if the engine
// goroutine is only polling for work; the caller then enqueues its op and
// passes its handle to DriveHeld, which runs the rounds until the op
// completes and gives the right back. Holding it across Enqueue keeps the
// engine goroutine from starting the op's round between Enqueue and the
// caller's wait (it would win that race: it polls while the caller
// returns from Enqueue). False: wait as usual.
func (e *Engine) TryHold() bool { return e.takeDrive() }

// DriveHeld runs rounds until h completes or no round has work (see
// drive), then releases what TryHold took; h == nil only releases it.
// The caller then waits on h as usual.
func (e *Engine) DriveHeld(h *Handle) {
	if h == nil {
		e.letGo()
		return
	}
	e.driveHeld(h)
}

// CallerIdleLimit bounds how long a driving caller sleeps in a shared
// Idle for its peers to start the round (then it lets go of drv, and
// waits for the engine goroutine as usual): the engine goroutine's stall
// inspector and heartbeat wait meanwhile.
const CallerIdleLimit = 10 * time.Millisecond

// driveHeld is drive's loop; it is entered with e.drv held and returns
// with it released. With a shared Idle the caller also sleeps there for
// its peers (up to CallerIdleLimit), so that their round wakes this
// thread alone, which runs it and returns: no hand-off to the engine
// goroutine and back.
func (e *Engine) driveHeld(h *Handle) {
	var until time.Time
	for {
		if h.Poll() { // done meanwhile (possibly before the first round)
			e.letGo()
			return
		}
		e.mu.Lock()
		over := e.closed || e.err != nil
		e.mu.Unlock()
		work := !over && e.queued.Load()
		if !over && !work {
			wait := time.Duration(0)
			if e.sharedIdle {
				if until.IsZero() {
					until = time.Now().Add(CallerIdleLimit)
				}
				wait = max(time.Until(until), 0)
			}
			in, err := e.control.Idle(wait)
			if err != nil {
				e.closePlanes()
				e.stop(err)
				e.letGo()
				return
			}
			work = in || e.queued.Load()
			if !work && wait > 0 {
				continue // woke early (the engine goroutine was looking too): until the limit
			}
		}
		if !work {
			e.letGo()
			return
		}
		e.stats.driven.Add(1)
		ok := e.step()
		e.letGo()
		if !ok || !e.tryHold() {
			return
		}
	}
}

// heartbeatIn returns how long until this rank should start an empty round
// to check that its peers are still there (0: now), or -1 when none is
// needed. One is needed while ops of this rank wait for other ranks: the
// engine is event-driven, so without it a rank whose op waits at the
// coordinator for a peer that has stopped (SIGSTOP, swapped out) would
// idle forever; the empty round blocks on that peer, and the data plane's
// stall notices and timeout (HOROVOD_GLOO_TIMEOUT_SECONDS) name it — as
// Horovod's background loop, which talks to every rank each cycle, does.
// A live peer answers the round from its own Idle at once.
func (e *Engine) heartbeatIn() time.Duration {
	if e.cfg.Heartbeat <= 0 {
		return -1
	}
	e.mu.Lock()
	pending := len(e.table) > 0 || len(e.joins) > 0
	e.mu.Unlock()
	if !pending {
		return -1
	}
	return max(time.Until(e.lastRound.Add(e.cfg.Heartbeat)), 0)
}

// pace implements CycleTime: a round with work of this rank's own starts
// no sooner than CycleTime after the previous one, so that ops enqueued in
// between join it.
func (e *Engine) pace() {
	if e.cfg.CycleTime > 0 && e.queued.Load() {
		if wait := time.Until(e.lastRound.Add(e.cfg.CycleTime)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-e.quit:
				t.Stop()
			}
		}
	}
	e.lastRound = time.Now()
}

// tl returns the current timeline (nil: none; its methods accept nil).
func (e *Engine) tl() *timeline.Timeline {
	if e.cfg.Timeline == nil {
		return nil
	}
	return e.cfg.Timeline.Load()
}

// spinForWork busy-polls for up to Config.Spin for a local enqueue or a
// peer starting a round, so back-to-back ops skip the sleep/wake-up. The
// caller holds e.drv; it is released between polls so that a caller
// waiting for its op can run the round itself (drive): the engine
// goroutine then blocks on e.drv until that round is over, instead of
// spinning beside it.
func (e *Engine) spinForWork() bool {
	e.polling.Store(true)
	defer e.polling.Store(false)
	deadline := time.Now().Add(e.cfg.Spin)
	for time.Now().Before(deadline) {
		if e.queued.Load() {
			return true
		}
		if in, err := e.control.Idle(0); in || err != nil {
			return true // an error is reported by the round
		}
		// The caller whose op just completed was made runnable on this
		// thread's queue: let it run here (and enqueue its next op, or
		// drive its round) rather than wake another OS thread for it,
		// which costs tens of µs on VMs. A caller that wants to drive
		// (takeDrive) gets e.drv meanwhile.
		if e.wantDrive.Load() == 0 {
			runtime.Gosched()
			continue
		}
		// Hand the engine to the asking caller: let go until it took it
		// (or gave up), then wait for its round to end.
		e.drv.Unlock()
		for e.wantDrive.Load() > 0 {
			runtime.Gosched()
		}
		e.drv.Lock()
		if e.halted.Load() { // not e.mu: an enqueuing caller holds it, and would park
			return true // the loop sees it
		}
	}
	// Idle(0) may have consumed an enqueue's Kick: look once more, or the
	// blocking Idle that follows would sleep through it.
	return e.queued.Load()
}

// stop records why the engine stopped and fails everything pending.
func (e *Engine) stop(err error) {
	e.mu.Lock()
	if e.err == nil {
		switch {
		case e.retire != nil:
			err = e.retire
		case e.closed:
			err = ErrShutdown
		}
		e.err = err
	}
	err = e.err
	e.halted.Store(true)
	e.mu.Unlock()
	e.failAll(err)
}

func (e *Engine) failAll(err error) {
	e.mu.Lock()
	ops := make([]*Op, 0, len(e.table)+len(e.joins))
	for _, o := range e.table {
		ops = append(ops, o)
	}
	ops = append(ops, e.joins...)
	clear(e.table)
	e.joins = nil
	e.queue = nil
	e.mu.Unlock()
	for _, o := range ops {
		o.h.err = err
		o.h.finish()
	}
}

// Activity says what the engine goroutine is doing, for messages about a
// wait that makes no progress: the operation and tensors being executed,
// the negotiation round (with the tensors this rank has pending), or "".
// Safe from any goroutine.
func (e *Engine) Activity() string {
	if !e.busy.Load() {
		return ""
	}
	if r := e.running.Load(); r != nil {
		return fmt.Sprintf("%s of %s", r.Type, quoteNames(r.Names))
	}
	e.mu.Lock()
	names := make([]string, 0, len(e.table))
	for n := range e.table {
		names = append(names, n)
	}
	e.mu.Unlock()
	sort.Strings(names)
	if len(names) == 0 {
		return "a negotiation round"
	}
	return "a negotiation round (pending here: " + quoteNames(names) + ")"
}

// quoteNames lists up to six names, quoted, and how many more.
func quoteNames(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i == 6 {
			fmt.Fprintf(&b, " and %d more", len(names)-6)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	return b.String()
}

// spinSkipAfter is how many idles in a row, each begun with nothing in
// flight, must outlast the spin before the engine stops spinning after
// its rounds (one such idle may be a pause between two bursts).
const spinSkipAfter = 2

// longIdle: an idle that outlasts this many spins counts as long. Not
// one: the pause between two bursts of a caller (its completions handled,
// its next ops prepared) takes a few spins, and each burst that finds the
// engine asleep costs more than the spin saved (a 200-op batch from
// Python measured 1.6× slower at 1×); a training step's pause (its
// forward and backward passes) takes tens.
const longIdle = 4
