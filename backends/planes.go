package backends

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// The engine of a process set talks to two contracts:
//
//   - a ControlPlane carries the negotiation: small variable-length messages
//     to and from one rank, the per-round status exchange, and the idle
//     wait that lets a sleeping engine wake when a peer starts a round;
//   - a DataPlane carries the tensors: the collectives of Communicator on
//     memory whose location it declares (Memory).
//
// tcp, shm and hier communicators are both (one object serves as the two
// planes of a set). A data plane without a control plane of its own (MPI,
// NCCL) is paired with the control plane of the set's host transport by
// NewPair. The conformance suite (backends/conformance) tests both contracts.

// Messenger moves variable-length control messages in one hop (the engine's
// negotiation). Both are collective.
type Messenger interface {
	// GatherMsgs: every member sends msg to root; root returns all of them
	// indexed by rank, the others nil.
	GatherMsgs(msg []byte, root int) ([][]byte, error)
	// BcastMsg returns root's msg on every member.
	BcastMsg(msg []byte, root int) ([]byte, error)
}

// Idler lets the communicator's single user goroutine sleep until a peer
// starts talking, so an idle engine needs no polling cycle.
type Idler interface {
	// Idle blocks until a peer sent data (incoming = true), Kick was called
	// (false; a Kick before Idle makes the next Idle return at once),
	// timeout passed (false; < 0: none) or the communicator closed
	// (error). A peer that closed or died is reported as incoming or as an
	// error; either way the next operation reports it.
	Idle(timeout time.Duration) (incoming bool, err error)
	// Kick wakes Idle; safe from any goroutine.
	Kick()
}

// SharedIdler is an Idler whose Idle may run while another goroutine runs
// the communicator's operations: it holds the communicator only while it
// looks, never while it sleeps, and then reports incoming work only as a
// reason to look again. The engine sleeps in such an Idle without holding
// the right to run rounds, so that a caller waiting for its op can run the
// round itself instead of waking the engine goroutine and being woken by
// it (issue 27).
type SharedIdler interface {
	Idler
	IdleShared() bool
}

// ControlPlane is what a process set's engine negotiates over. Ranks and
// the calling rules are those of Communicator (collective, one goroutine at
// a time, broken after a peer failure); Kick alone is safe from any
// goroutine, and Close from any goroutine to interrupt a blocked call.
type ControlPlane interface {
	Rank() int
	Size() int
	Messenger
	// AllgatherStatus is the small exchange that starts every negotiation
	// round: every member contributes len(send) bytes (the same length on
	// every member) and recv (Size()·len(send) bytes) receives them in rank
	// order. It reaches every member directly, so a member blocked in Idle
	// wakes (incoming = true) as soon as any peer starts one.
	AllgatherStatus(send, recv []byte) error
	Idler
	// Close releases the plane; safe to call more than once.
	Close() error
}

// DataPlane is what a process set's engine executes collectives on: a
// Communicator that declares where the memory it moves may live.
type DataPlane interface {
	Communicator
	// Memory lists the kinds of memory its buffers may be in (host-memory
	// planes: HostMemory only). It is a declaration, constant for the
	// plane's life: the engine reads it to refuse tensors the plane cannot
	// move, instead of finding out in the middle of a collective.
	Memory() []MemoryKind
}

// Hierarchical is a data plane that can switch its allreduce and allgather
// between hierarchical and flat algorithms while it runs (backends/hier);
// the autotuner uses it. Every member must switch alike, between
// collectives, from the goroutine that calls them.
type Hierarchical interface {
	// HierarchicalChoices says which of the two can be hierarchical (the
	// parts the plane was built with).
	HierarchicalChoices() (allreduce, allgather bool)
	// SetHierarchical selects them; a part not in HierarchicalChoices
	// stays flat.
	SetHierarchical(allreduce, allgather bool)
	// HierarchicalState reports what is selected now.
	HierarchicalState() (allreduce, allgather bool)
}

// Accepts reports whether p's collectives take buffers on device d.
func Accepts(p DataPlane, d Device) bool { return Declares(p.Memory(), d) }

// Declares reports whether kinds, what a data plane declared with Memory
// (the engine keeps it for the plane's life), include d's memory.
func Declares(kinds []MemoryKind, d Device) bool { return slices.Contains(kinds, d.Kind) }

// Planes are the two planes a set's engine runs on. Data and Control may be
// the same object (tcp, shm, hier).
type Planes struct {
	Data    DataPlane
	Control ControlPlane
}

// Close closes both planes (Close is idempotent, so one object serving as
// both is fine).
func (p Planes) Close() error {
	var errs []error
	if p.Data != nil {
		errs = append(errs, p.Data.Close())
	}
	if p.Control != nil {
		errs = append(errs, p.Control.Close())
	}
	return errors.Join(errs...)
}

// Pair is a data plane that borrows its control plane: collectives and
// point-to-point go to Data, negotiation and idle/wake to Control, and
// Close closes both. Both must number the same members alike. It is what
// an MPI or NCCL data plane is given to the engine as (with the control
// plane of the set's host transport, tcp or shm).
type Pair struct {
	data    DataPlane
	control ControlPlane
}

var (
	_ DataPlane    = (*Pair)(nil)
	_ ControlPlane = (*Pair)(nil)
)

// NewPair pairs data with control; they must agree on this rank and the
// member count.
func NewPair(data DataPlane, control ControlPlane) (*Pair, error) {
	if data == nil || control == nil {
		return nil, fmt.Errorf("%w: a pair needs a data plane and a control plane", ErrInvalidArgument)
	}
	if data.Rank() != control.Rank() || data.Size() != control.Size() {
		return nil, fmt.Errorf("%w: the data plane is rank %d of %d but the control plane rank %d of %d",
			ErrInvalidArgument, data.Rank(), data.Size(), control.Rank(), control.Size())
	}
	return &Pair{data: data, control: control}, nil
}

// Planes returns the pair as the engine's two planes.
func (p *Pair) Planes() Planes { return Planes{Data: p.data, Control: p.control} }

func (p *Pair) Rank() int            { return p.data.Rank() }
func (p *Pair) Size() int            { return p.data.Size() }
func (p *Pair) Memory() []MemoryKind { return p.data.Memory() }
func (p *Pair) Barrier() error       { return p.data.Barrier() }
func (p *Pair) Broadcast(b []byte, root int) error {
	return p.data.Broadcast(b, root)
}
func (p *Pair) Allreduce(buf []byte, dt DType, op ReduceOp) error {
	return p.data.Allreduce(buf, dt, op)
}
func (p *Pair) Allgatherv(send, recv []byte, counts []int) error {
	return p.data.Allgatherv(send, recv, counts)
}
func (p *Pair) Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	return p.data.Alltoallv(send, sendCounts, recv, recvCounts)
}
func (p *Pair) ReduceScatter(send, recv []byte, counts []int, dt DType, op ReduceOp) error {
	return p.data.ReduceScatter(send, recv, counts, dt, op)
}
func (p *Pair) Send(buf []byte, dst int, tag uint32) error { return p.data.Send(buf, dst, tag) }
func (p *Pair) Recv(buf []byte, src int, tag uint32) error { return p.data.Recv(buf, src, tag) }

func (p *Pair) GatherMsgs(msg []byte, root int) ([][]byte, error) {
	return p.control.GatherMsgs(msg, root)
}
func (p *Pair) BcastMsg(msg []byte, root int) ([]byte, error) { return p.control.BcastMsg(msg, root) }
func (p *Pair) AllgatherStatus(send, recv []byte) error       { return p.control.AllgatherStatus(send, recv) }
func (p *Pair) Idle(timeout time.Duration) (bool, error)      { return p.control.Idle(timeout) }
func (p *Pair) Kick()                                         { p.control.Kick() }

// IdleShared implements SharedIdler when the control plane does.
func (p *Pair) IdleShared() bool {
	s, ok := p.control.(SharedIdler)
	return ok && s.IdleShared()
}

// Close closes the data plane, then the control plane.
func (p *Pair) Close() error { return p.Planes().Close() }

// EqualCounts returns n copies of c (the counts of an Allgatherv in which
// every member contributes c bytes, as AllgatherStatus).
func EqualCounts(n, c int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = c
	}
	return counts
}
