// Package engine is hvd's Horovod engine for one process set: named
// asynchronous requests, negotiation by the set's coordinator (set rank 0),
// tensor fusion and execution in one agreed order on every member.
//
// Files by responsibility:
//
//   - engine.go: ops, handles, Config (the two planes and the knobs);
//   - loop.go: lifecycle (New, Enqueue, Close) and the loop (idle, pacing);
//   - round.go: one negotiation round, a pure decision plus its I/O;
//   - execute.go: execution of each collective on the data plane
//     (adasum.go: Adasum);
//   - stall.go: the stall inspector.
//
// The pure parts — the wire messages (this file), the coordinator's table
// (coordinator.go), the response cache (cache.go), the fusion planner
// (fusion.go) and the round's decisions (round.go) — do no I/O and are
// tested on their own, the rounds as golden scenarios (testdata/rounds).
// The engine drives them over a backends.ControlPlane (negotiation) and a
// backends.DataPlane (tensors).
package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/hvdorg/hvd/backends"
)

// OpType follows Horovod's RequestType numbering.
type OpType uint8

const (
	Allreduce     OpType = 0
	Allgather     OpType = 1
	Broadcast     OpType = 2
	Join          OpType = 3
	Alltoall      OpType = 5
	Barrier       OpType = 6
	Reducescatter OpType = 7
	// Error is a response type only.
	Error OpType = 8
)

func (t OpType) String() string {
	switch t {
	case Allreduce:
		return "allreduce"
	case Allgather:
		return "allgather"
	case Broadcast:
		return "broadcast"
	case Join:
		return "join"
	case Alltoall:
		return "alltoall"
	case Barrier:
		return "barrier"
	case Reducescatter:
		return "reducescatter"
	case Error:
		return "error"
	}
	return fmt.Sprintf("op(%d)", uint8(t))
}

// Request is what a rank tells the coordinator about one tensor it has
// enqueued: everything that must agree across ranks.
type Request struct {
	Type      OpType
	DType     backends.DType
	Name      string
	Shape     []int64
	ReduceOp  ReduceOp // Average, Sum, … (reduceop.go)
	Prescale  float64
	Postscale float64
	Root      int32 // set rank, broadcast only
	Group     string
	GroupSize int32
	// Priority orders ready tensors: higher first (negotiated, fused and
	// executed); ranks may differ, the highest counts.
	Priority int32
}

// RankMessage is one rank's contribution to a negotiation round.
type RankMessage struct {
	Requests []Request
}

// Response is one unit of work every member executes, in list order.
type Response struct {
	Type      OpType
	Names     []string // several when fused
	Err       string   // Type == Error
	DType     backends.DType
	ReduceOp  ReduceOp
	Prescale  float64
	Postscale float64
	Root      int32
	// Counts: allreduce/reducescatter element counts per name (joined
	// ranks need them to contribute zeros); allgather: dim 0 of every rank,
	// len(Names)·size values, name-major.
	Counts []int64
	// RowElems: allgather, elements per dim-0 row of each name.
	RowElems   []int64
	LastJoined int32 // Join: set rank that joined last
	Joined     []int32
	// Priority: the highest of the ranks' requests (of the first name when
	// fused); every member executes a round's list in this order, higher
	// first, ties in the coordinator's order.
	Priority int32
}

// ResponseList is the coordinator's decision for one round.
type ResponseList struct {
	Responses []Response
}

// ---- encoding: varint-based, little-endian floats ----

type writer struct{ b []byte }

func (w *writer) u(v uint64)    { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) i(v int64)     { w.b = binary.AppendVarint(w.b, v) }
func (w *writer) f(v float64)   { w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(v)) }
func (w *writer) s(v string)    { w.u(uint64(len(v))); w.b = append(w.b, v...) }
func (w *writer) byte1(v uint8) { w.b = append(w.b, v) }

type reader struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated message")

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) i() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) f() float64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail(errTruncated)
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *reader) byte1() uint8 {
	if r.err != nil || len(r.b) < 1 {
		r.fail(errTruncated)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// count reads a length and checks that at least min bytes per item remain,
// so a corrupt length cannot make us allocate gigabytes.
func (r *reader) count(min int) int {
	n := r.u()
	if r.err == nil && (n > uint64(len(r.b)/max(min, 1)) && n > 0) {
		r.fail(fmt.Errorf("corrupt message: %d items in %d bytes", n, len(r.b)))
		return 0
	}
	return int(n)
}

func (r *reader) s() string {
	n := r.count(1)
	if r.err != nil {
		return ""
	}
	v := string(r.b[:n])
	r.b = r.b[n:]
	return v
}

func (r *reader) i64s() []int64 {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	out := make([]int64, n)
	for k := range out {
		out[k] = r.i()
	}
	return out
}

func (w *writer) i64s(v []int64) {
	w.u(uint64(len(v)))
	for _, x := range v {
		w.i(x)
	}
}

// Encode serialises a rank message.
func (m *RankMessage) Encode() []byte {
	w := &writer{}
	w.u(uint64(len(m.Requests)))
	for _, q := range m.Requests {
		w.byte1(uint8(q.Type))
		w.byte1(uint8(q.DType))
		w.byte1(q.ReduceOp)
		w.s(q.Name)
		w.i64s(q.Shape)
		w.f(q.Prescale)
		w.f(q.Postscale)
		w.i(int64(q.Root))
		w.s(q.Group)
		w.i(int64(q.GroupSize))
		w.i(int64(q.Priority))
	}
	return w.b
}

// DecodeRankMessage parses a rank message, rejecting anything malformed.
func DecodeRankMessage(b []byte) (*RankMessage, error) {
	r := &reader{b: b}
	n := r.count(12)
	m := &RankMessage{}
	for k := 0; k < n && r.err == nil; k++ {
		q := Request{Type: OpType(r.byte1()), DType: backends.DType(r.byte1()), ReduceOp: r.byte1()}
		q.Name = r.s()
		q.Shape = r.i64s()
		q.Prescale, q.Postscale = r.f(), r.f()
		q.Root = int32(r.i())
		q.Group = r.s()
		q.GroupSize = int32(r.i())
		q.Priority = int32(r.i())
		if r.err == nil && (!q.DType.Valid() || q.Type > Reducescatter || q.Type == 4) {
			r.fail(fmt.Errorf("corrupt request %q: type %d dtype %d", q.Name, q.Type, q.DType))
		}
		m.Requests = append(m.Requests, q)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Errorf("corrupt message: %d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return nil, fmt.Errorf("hvd: engine: rank message: %w", r.err)
	}
	return m, nil
}

// Encode serialises a response list.
func (l *ResponseList) Encode() []byte {
	w := &writer{}
	w.u(uint64(len(l.Responses)))
	for _, p := range l.Responses {
		w.byte1(uint8(p.Type))
		w.u(uint64(len(p.Names)))
		for _, n := range p.Names {
			w.s(n)
		}
		w.s(p.Err)
		w.byte1(uint8(p.DType))
		w.byte1(p.ReduceOp)
		w.f(p.Prescale)
		w.f(p.Postscale)
		w.i(int64(p.Root))
		w.i64s(p.Counts)
		w.i64s(p.RowElems)
		w.i(int64(p.LastJoined))
		w.u(uint64(len(p.Joined)))
		for _, j := range p.Joined {
			w.i(int64(j))
		}
		w.i(int64(p.Priority))
	}
	return w.b
}

// DecodeResponseList parses a response list.
func DecodeResponseList(b []byte) (*ResponseList, error) {
	r := &reader{b: b}
	n := r.count(25)
	l := &ResponseList{}
	for k := 0; k < n && r.err == nil; k++ {
		p := Response{Type: OpType(r.byte1())}
		nn := r.count(1)
		for j := 0; j < nn && r.err == nil; j++ {
			p.Names = append(p.Names, r.s())
		}
		p.Err = r.s()
		p.DType = backends.DType(r.byte1())
		p.ReduceOp = r.byte1()
		p.Prescale, p.Postscale = r.f(), r.f()
		p.Root = int32(r.i())
		p.Counts = r.i64s()
		p.RowElems = r.i64s()
		p.LastJoined = int32(r.i())
		nj := r.count(1)
		for j := 0; j < nj && r.err == nil; j++ {
			p.Joined = append(p.Joined, int32(r.i()))
		}
		p.Priority = int32(r.i())
		if r.err == nil && p.Type > Error {
			r.fail(fmt.Errorf("corrupt response type %d", p.Type))
		}
		l.Responses = append(l.Responses, p)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Errorf("corrupt message: %d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return nil, fmt.Errorf("hvd: engine: response list: %w", r.err)
	}
	return l, nil
}
