package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// soloPlane is a one-member data and control plane without sockets: every
// collective of one rank is a copy or nothing. It lets the engine's loop,
// round and execution run in a unit test.
type soloPlane struct {
	memory []backends.MemoryKind
	kick   chan struct{}
	mu     sync.Mutex
	closed bool
	calls  []string
}

func newSolo(memory ...backends.MemoryKind) *soloPlane {
	if memory == nil {
		memory = backends.HostOnly()
	}
	return &soloPlane{memory: memory, kick: make(chan struct{}, 1)}
}

func (p *soloPlane) note(c string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return backends.ErrClosed
	}
	p.calls = append(p.calls, c)
	return nil
}

func (p *soloPlane) Rank() int                     { return 0 }
func (p *soloPlane) Size() int                     { return 1 }
func (p *soloPlane) Memory() []backends.MemoryKind { return p.memory }
func (p *soloPlane) Allreduce([]byte, backends.DType, backends.ReduceOp) error {
	return p.note("allreduce")
}
func (p *soloPlane) Allgatherv(s, r []byte, _ []int) error { copy(r, s); return p.note("allgatherv") }
func (p *soloPlane) Broadcast([]byte, int) error           { return p.note("broadcast") }
func (p *soloPlane) Alltoallv(s []byte, _ []int, r []byte, _ []int) error {
	copy(r, s)
	return p.note("alltoallv")
}
func (p *soloPlane) ReduceScatter(s, r []byte, _ []int, _ backends.DType, _ backends.ReduceOp) error {
	copy(r, s)
	return p.note("reducescatter")
}
func (p *soloPlane) Barrier() error                 { return p.note("barrier") }
func (p *soloPlane) Send([]byte, int, uint32) error { return backends.ErrUnsupported }
func (p *soloPlane) Recv([]byte, int, uint32) error { return backends.ErrUnsupported }
func (p *soloPlane) GatherMsgs(m []byte, _ int) ([][]byte, error) {
	return [][]byte{m}, p.note("gather")
}
func (p *soloPlane) BcastMsg(m []byte, _ int) ([]byte, error) { return m, p.note("bcast") }
func (p *soloPlane) AllgatherStatus(s, r []byte) error {
	copy(r, s)
	return p.note("status")
}
func (p *soloPlane) Idle(timeout time.Duration) (bool, error) {
	var t <-chan time.Time
	if timeout >= 0 {
		t = time.After(timeout)
	}
	for {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return false, backends.ErrClosed
		}
		select {
		case <-p.kick:
			return false, nil
		case <-t:
			return false, nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}
func (p *soloPlane) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}
func (p *soloPlane) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

func (p *soloPlane) count(c string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, x := range p.calls {
		if x == c {
			n++
		}
	}
	return n
}

// The engine runs on a control plane and a data plane that are different
// objects: negotiation goes to one, tensors to the other.
func TestEngineUsesBothPlanes(t *testing.T) {
	data, ctl := newSolo(), newSolo()
	e, err := New(Config{Data: data, Control: ctl, CacheCapacity: 8, FusionThreshold: 1 << 20, Library: "SOLO"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(nil)
	for i := 0; i < 3; i++ {
		o := &Op{Type: Allreduce, Name: "a", In: Tensor{Data: make([]byte, 8), DType: backends.Float32, Shape: []int64{2}}, ReduceOp: 1}
		o.Out = o.In
		if err := e.Enqueue(o); err != nil {
			t.Fatal(err)
		}
		if err := o.Handle().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if data.count("allreduce") != 3 || data.count("status") != 0 || data.count("gather") != 0 {
		t.Errorf("data plane calls: %v", data.calls)
	}
	if ctl.count("allreduce") != 0 || ctl.count("status") < 3 || ctl.count("gather") != 1 {
		t.Errorf("control plane calls: %v (want one negotiation, then the cache)", ctl.calls)
	}
	if s := e.Stats(); s.Negotiations != 1 || s.CachedOps != 2 {
		t.Errorf("stats %+v", s)
	}
}

// A tensor in memory the data plane does not declare is refused at
// Enqueue, naming the tensor, the memory and the plane; nothing is sent.
func TestEngineRefusesUndeclaredMemory(t *testing.T) {
	data, ctl := newSolo(), newSolo()
	e, err := New(Config{Data: data, Control: ctl, SetID: 3, Library: "SOLO"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(nil)
	gpu := backends.Device{Kind: backends.GPUMemory, Index: 1}
	o := &Op{Type: Allreduce, Name: "g", In: Tensor{Data: make([]byte, 4), DType: backends.Float32, Shape: []int64{1}, Device: gpu}}
	err = e.Enqueue(o)
	if !errors.Is(err, backends.ErrUnsupported) {
		t.Fatalf("a GPU tensor on a host plane: %v", err)
	}
	for _, want := range []string{`"g"`, "gpu:1", "SOLO", "process set 3"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	// A plane that declares GPU memory takes it.
	e2, err := New(Config{Data: newSolo(backends.HostMemory, backends.GPUMemory), Control: newSolo()})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close(nil)
	o2 := &Op{Type: Barrier, Name: "b", In: Tensor{Device: gpu}}
	if err := e2.Enqueue(o2); err != nil {
		t.Fatal(err)
	}
	if err := o2.Handle().Wait(); err != nil {
		t.Fatal(err)
	}
}

// Planes that disagree on the rank or size are refused.
func TestEngineNeedsMatchingPlanes(t *testing.T) {
	if _, err := New(Config{Data: newSolo()}); !errors.Is(err, backends.ErrInvalidArgument) {
		t.Errorf("no control plane: %v", err)
	}
	if _, err := New(Config{Data: newSolo(), Control: twoRanks{newSolo()}}); !errors.Is(err, backends.ErrInvalidArgument) {
		t.Errorf("a control plane of another size: %v", err)
	}
}

type twoRanks struct{ *soloPlane }

func (twoRanks) Size() int { return 2 }

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A caller that drives (WaitDriving, TryHold/DriveHeld) always gives the
// engine back: also when its op completed between its last look and its
// taking the engine (a round the engine goroutine ran), and when it held the
// engine for an enqueue that failed. A leaked hold would stop the engine
// goroutine from ever joining a peer's round again (a hang under hvdrun).
// Many ops with the engine spinning, on one rank, then the engine still
// runs rounds.
func TestDrivingNeverKeepsTheEngine(t *testing.T) {
	// The engine polls for work for a long time after each op, as it does
	// between the back-to-back ops of a training loop, so holds can be taken.
	e, err := New(Config{Data: newSolo(), Control: newSolo(), CacheCapacity: 8, Spin: 10 * time.Second, Library: "SOLO"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		closed := make(chan struct{})
		go func() { e.Close(nil); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("Close hangs: the engine goroutine waits for an engine a driving caller kept")
		}
	}()
	in := Tensor{Data: make([]byte, 4), DType: backends.Float32, Shape: []int64{1}}
	stress := make(chan error, 1)
	go func() { stress <- drivenOps(e, in, 2000) }()
	select {
	case err := <-stress:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("driven ops hang: a driving caller kept the engine")
	}
	// Deterministically: the hold taken for a handle that is already done.
	done := &Op{Type: Allreduce, Name: "z", In: in, Out: in, ReduceOp: 1}
	if err := e.Enqueue(done); err != nil {
		t.Fatal(err)
	}
	<-done.Handle().Done()
	take := func() {
		deadline := time.Now().Add(5 * time.Second)
		for !e.TryHold() {
			if time.Now().After(deadline) {
				t.Fatal("the engine was never free to take")
			}
			time.Sleep(time.Microsecond)
		}
	}
	take()
	e.DriveHeld(done.Handle())
	take()
	e.DriveHeld(nil) // a hold for an enqueue that failed
	// A holder runs its op's round itself (CallerRounds), and gives the
	// engine back.
	take()
	before := e.Stats().CallerRounds
	mine := &Op{Type: Allreduce, Name: "w", In: in, Out: in, ReduceOp: 1}
	if err := e.Enqueue(mine); err != nil {
		e.DriveHeld(nil)
		t.Fatal(err)
	}
	e.DriveHeld(mine.Handle())
	if !mine.Handle().Poll() || e.Stats().CallerRounds == before {
		t.Fatalf("the holder did not run its op's round (done %v, caller rounds %d → %d)",
			mine.Handle().Poll(), before, e.Stats().CallerRounds)
	}
	// The engine goroutine still gets the engine: an op completes through it.
	o := &Op{Type: Allreduce, Name: "y", In: in, Out: in, ReduceOp: 1}
	if err := e.Enqueue(o); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.Handle().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the engine goroutine never ran the round: a driving caller kept the engine")
	}
	// And the hold is free now (the engine goroutine lets go between polls).
	deadline := time.Now().Add(5 * time.Second)
	for !e.TryHold() {
		if time.Now().After(deadline) {
			t.Fatal("the engine was never free to take")
		}
	}
	e.DriveHeld(nil)
}

// drivenOps runs n allreduces on e, half of them enqueued under a hold
// (TryHold/DriveHeld), a third already completed before their driving wait.
func drivenOps(e *Engine, in Tensor, n int) error {
	for i := 0; i < n; i++ {
		o := &Op{Type: Allreduce, Name: "x", In: in, Out: in, ReduceOp: 1}
		held := i%2 == 0 && e.TryHold()
		if err := e.Enqueue(o); err != nil {
			if held {
				e.DriveHeld(nil)
			}
			return err
		}
		if held {
			e.DriveHeld(o.Handle())
		}
		if i%3 == 0 {
			<-o.Handle().Done() // completed before the driving wait below looks
		}
		if err := o.Handle().WaitDriving(); err != nil {
			return err
		}
	}
	return nil
}

// pollCounter counts the control plane's Idle(0) polls: the engine's idle
// spin (spinForWork) is made of them.
type pollCounter struct {
	*soloPlane
	polls atomic.Int64
}

func (p *pollCounter) Idle(timeout time.Duration) (bool, error) {
	if timeout == 0 {
		p.polls.Add(1)
	}
	return p.soloPlane.Idle(timeout)
}

// The engine spins for work after its rounds while ops come back to back,
// stops after idles (nothing in flight) that each outlast longIdle spins —
// a training step's pattern, where a spin only takes the core from the
// framework thread — and spins again once ops come back to back.
func TestIdleSpinFollowsTheGaps(t *testing.T) {
	const spin = time.Millisecond
	ctl := &pollCounter{soloPlane: newSolo()}
	e, err := New(Config{Data: newSolo(), Control: ctl, CacheCapacity: 8, FusionThreshold: 1 << 20, Library: "SOLO", Spin: spin})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(nil)
	op := func() {
		o := &Op{Type: Allreduce, Name: "a", In: Tensor{Data: make([]byte, 8), DType: backends.Float32, Shape: []int64{2}}, ReduceOp: 1}
		o.Out = o.In
		if err := e.Enqueue(o); err != nil {
			t.Fatal(err)
		}
		if err := o.Handle().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	burst := func() int64 {
		before := ctl.polls.Load()
		for i := 0; i < 20; i++ {
			op()
		}
		time.Sleep(2 * spin) // the last op's idle spin ends
		return ctl.polls.Load() - before
	}
	if n := burst(); n == 0 {
		t.Fatal("no idle spin between back-to-back ops")
	}
	pause := 10 * longIdle * spin
	for i := 0; i < spinSkipAfter; i++ { // the long idles that stop the spin
		time.Sleep(pause)
		op()
	}
	before := ctl.polls.Load()
	for i := 0; i < 3; i++ {
		time.Sleep(pause)
		op()
	}
	time.Sleep(2 * spin)
	if n := ctl.polls.Load() - before; n != 0 {
		t.Errorf("%d idle polls after ops %v apart: the engine still spins after every round", n, pause)
	}
	if n := burst(); n == 0 {
		t.Error("back-to-back ops again, and still no idle spin")
	}
}
