package engine

import (
	"errors"
	"sync"
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
