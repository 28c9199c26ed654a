package sdk

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// ReduceOptions are Horovod's allreduce/reducescatter parameters. The zero
// value is Horovod's default: Average, no scaling, an automatic name.
type ReduceOptions struct {
	// Op is the reduction. Adasum (allreduce only) combines the members'
	// tensors pairwise with Horovod's adaptive summation: floating tensors,
	// a power-of-two set size, per tensor even when fused.
	Op ReduceOp
	// Prescale multiplies every input before the reduction; Postscale the
	// result after it (0 means 1). Average divides the postscale by the set
	// size. Integer tensors are scaled as double·int truncated toward zero.
	Prescale, Postscale float64
	// Compression casts floating tensors to 16 bits on the wire.
	Compression Compression
	// Name identifies the tensor across ranks (Horovod's name=): ops are
	// matched by name, not by call order. Empty: "<op>.noname.<n>" with a
	// per-process-set counter, so unnamed calls must happen in the same
	// order on every member (a completed World.Join restarts the global
	// set's counter on every rank).
	Name string
	// Priority orders this tensor among those ready at the same time on
	// every member: higher priorities are negotiated, fused and executed
	// first; equal ones keep their order (0, the default, is Horovod's
	// behaviour). Ranks may give different values: the highest counts.
	Priority int
}

// Option adjusts a collective whose other parameters are a name
// (allgather, broadcast, alltoall and their grouped forms):
//
//	ps.AllgatherAsync(t, "emb", sdk.Priority(2))
type Option interface{ apply(*opOptions) }

type opOptions struct{ priority int }

// Priority is ReduceOptions.Priority as an Option: among the tensors ready
// at the same time, higher priorities go first.
type Priority int

func (p Priority) apply(o *opOptions) { o.priority = int(p) }

func collectOptions(opts []Option) opOptions {
	var o opOptions
	for _, x := range opts {
		if x != nil {
			x.apply(&o)
		}
	}
	return o
}

// checkPriority refuses a priority the wire format cannot carry.
func checkPriority(op string, p int) error {
	if p < math.MinInt32 || p > math.MaxInt32 {
		return fmt.Errorf("%w: %s: priority %d is out of range (a 32-bit signed integer)", ErrInvalidArgument, op, p)
	}
	return nil
}

// Handle is an enqueued collective. Wait blocks until it completes and
// returns the result; Poll never blocks. Errors at enqueue (bad arguments,
// foreign or unknown set, duplicate name) are returned by the *Async call;
// errors found by negotiation (ErrMismatch) or execution (ErrPeerFailure,
// ErrShutdown) are returned by Wait — Horovod's ValueError vs.
// HorovodInternalError split.
type Handle struct {
	ps  *ProcessSet
	op  string
	ops []*engine.Op
	// finish[i], when set, turns op i's wire result into the user's output
	// (decompression); run once, by the first Wait.
	finish []func(engine.Tensor) Tensor
	once   sync.Once
	outs   []Tensor
	p2p    *p2pOp // a point-to-point op instead of ops
	// ops and outs of a single op, without allocations of their own
	one  [1]*engine.Op
	out1 [1]Tensor
}

// Wait blocks until the op completes and returns its output (the first one
// for grouped ops; see Outputs).
func (h *Handle) Wait() (Tensor, error) { return h.wait(waitPlain) }

// WaitFromC is Wait for a goroutine locked to a C caller's thread
// (cmd/libhvd): it first sleeps in the kernel until the engine completes
// the op (engine.Handle.WaitKernel), up to kernelWaitLimit, rather than
// being parked and woken through the Go scheduler. Results and errors are
// Wait's.
func (h *Handle) WaitFromC() (Tensor, error) { return h.wait(waitKernel) }

// kernelWaitLimit bounds WaitFromC's kernel sleep: small ops complete
// within it; a longer one then waits as Wait does.
const kernelWaitLimit = 2 * time.Millisecond

// kernelWaiters counts the goroutines in WaitFromC.
var kernelWaiters atomic.Int32

type waitMode int

const (
	waitPlain waitMode = iota
	waitDriving
	waitKernel
	waitBlocking
)

// WaitDriving is Wait for a goroutine locked to its OS thread, such as a C
// caller's (cmd/libhvd): while the set's engine is only polling for work,
// the caller runs the negotiation round and the collective itself instead
// of waiting for the engine's goroutine to complete the op and wake its
// thread (see engine.Handle.WaitDriving). Results and errors are Wait's.
func (h *Handle) WaitDriving() (Tensor, error) { return h.wait(waitDriving) }

func (h *Handle) wait(mode waitMode) (Tensor, error) {
	if h.p2p != nil {
		h.p2p.wait()
		if h.p2p.err != nil {
			return Tensor{}, h.p2p.err
		}
		return h.p2p.t, nil
	}
	for _, o := range h.ops {
		var err error
		switch mode {
		case waitDriving:
			err = o.Handle().WaitDriving()
		case waitBlocking:
			err = o.Handle().WaitBlocking()
		case waitKernel:
			// The kernel sleep keeps this thread's processor: never let
			// such sleepers take every processor (the engine goroutine
			// could then not run until their limit passed). Under one
			// processor that makes it Wait: WaitBlocking there made the
			// bound synchronous 8 B allreduce of hvd.torch 79 µs instead
			// of 13 (issue 27, sixth session), though it helps WaitMany.
			limit := time.Duration(0)
			if int(kernelWaiters.Add(1)) < runtime.GOMAXPROCS(0) {
				limit = kernelWaitLimit
			}
			err = o.Handle().WaitKernel(limit)
			kernelWaiters.Add(-1)
		default:
			err = o.Handle().Wait()
		}
		if err != nil {
			return Tensor{}, h.ps.wrapErr(h.op, err)
		}
	}
	h.once.Do(func() {
		if h.outs = h.out1[:]; len(h.ops) != 1 {
			h.outs = make([]Tensor, len(h.ops))
		}
		for i, o := range h.ops {
			if i < len(h.finish) && h.finish[i] != nil {
				h.outs[i] = h.finish[i](o.Handle().Out)
			} else {
				h.outs[i] = fromEngine(o.Handle().Out)
			}
		}
	})
	return h.outs[0], nil
}

// Poll reports whether the op (every op of a group) has completed.
func (h *Handle) Poll() bool {
	if h.p2p != nil {
		select {
		case <-h.p2p.done:
			return true
		default:
			return false
		}
	}
	for _, o := range h.ops {
		if !o.Handle().Poll() {
			return false
		}
	}
	return true
}

// Outputs returns every output of a grouped op, in input order (valid
// after a successful Wait).
func (h *Handle) Outputs() []Tensor { return h.outs }

// ReceivedSplits returns, for an alltoall, the rows received from each
// member (after Wait).
func (h *Handle) ReceivedSplits() []int32 {
	if h.p2p != nil {
		return nil
	}
	return h.ops[0].Handle().RecvSplits
}

// Name returns the full name the op was negotiated under (the first one for
// groups).
func (h *Handle) Name() string {
	if h.p2p != nil {
		return h.op
	}
	return h.ops[0].Name
}

func fromEngine(t engine.Tensor) Tensor { return Tensor{Data: t.Data, DType: t.DType, Shape: t.Shape} }
func toEngine(t Tensor) engine.Tensor {
	return engine.Tensor{Data: t.Data, DType: t.DType, Shape: t.Shape}
}

// fullName is Horovod's naming: "<op>.<name>", or "<op>.noname.<n>".
func (ps *ProcessSet) fullName(op, name string) string {
	if name != "" || ps == nil { // nil: enqueue reports the error
		return op + "." + name
	}
	return op + ".noname." + strconv.FormatInt(ps.counter.Add(1), 10)
}

func (ps *ProcessSet) enqueue(op string, ops ...*engine.Op) (*Handle, error) {
	if err := ps.usable(op); err != nil {
		return nil, err
	}
	if err := ps.checkAdasum(op, ops); err != nil {
		return nil, err
	}
	if err := ps.eng.Enqueue(ops...); err != nil {
		return nil, ps.wrapErr(op, err)
	}
	// ops itself is not kept (a caller's variadic slice stays on its stack)
	h := &Handle{ps: ps, op: op}
	if len(ops) == 1 {
		h.one[0] = ops[0]
		h.ops = h.one[:]
	} else {
		h.ops = append([]*engine.Op(nil), ops...)
	}
	return h, nil
}

// checkAdasum refuses an Adasum allreduce on a set whose size is not a
// power of two, as Horovod does (its VHDD pairs ranks by rank^2^k).
func (ps *ProcessSet) checkAdasum(op string, ops []*engine.Op) error {
	for _, o := range ops {
		if o.Type == engine.Allreduce && o.ReduceOp == uint8(Adasum) && !engine.IsPowerOfTwo(ps.Size()) {
			return fmt.Errorf("%w: %s: Adasum needs a power-of-two number of ranks, and process set %d %v has %d",
				backends.ErrUnsupported, op, ps.id, ps.ranks, ps.Size())
		}
	}
	return nil
}

func (o ReduceOptions) check(op string, t Tensor) error {
	if err := o.Compression.valid(); err != nil {
		return err
	}
	if err := checkPriority(op, o.Priority); err != nil {
		return err
	}
	if o.Op == Adasum {
		// Horovod's CPU Adasum: float16/32/64 (bfloat16 too here); the set
		// size is checked at enqueue (checkAdasum).
		if !engine.AdasumDType(t.DType) {
			return fmt.Errorf("%w: %s: Adasum supports float16, bfloat16, float32 and float64 tensors, not %v", ErrInvalidArgument, op, t.DType)
		}
		return nil
	}
	if _, err := o.Op.backendOp(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if t.DType == Bool && (o.Op == Average || o.Prescale != 0 && o.Prescale != 1 || o.Postscale != 0 && o.Postscale != 1) {
		return fmt.Errorf("%w: %s: bool tensors support Sum (or), Min (and), Max (or) and Product (and), without scaling", ErrInvalidArgument, op)
	}
	return nil
}

func (ps *ProcessSet) reduceOp(typ engine.OpType, t, out Tensor, o ReduceOptions, name string) *engine.Op {
	return &engine.Op{Type: typ, Name: name, In: toEngine(t), Out: toEngine(out), ReduceOp: engine.ReduceOp(o.Op),
		Prescale: o.Prescale, Postscale: o.Postscale, Priority: int32(o.Priority)}
}

// AllreduceAsync enqueues an allreduce of t into a new output tensor; t is
// not modified. Every member must enqueue the same name with the same shape,
// dtype and options (checked by negotiation).
func (ps *ProcessSet) AllreduceAsync(t Tensor, o ReduceOptions) (*Handle, error) {
	return ps.allreduceAsync(t, o, false)
}

// AllreduceInPlaceAsync enqueues an allreduce that writes t's own memory
// (Horovod's allreduce_async_). t must not be touched until Wait returns.
func (ps *ProcessSet) AllreduceInPlaceAsync(t Tensor, o ReduceOptions) (*Handle, error) {
	return ps.allreduceAsync(t, o, true)
}

func (ps *ProcessSet) allreduceAsync(t Tensor, o ReduceOptions, inPlace bool) (*Handle, error) {
	const op = "allreduce"
	if err := t.validate(op); err != nil {
		return nil, err
	}
	if err := o.check(op, t); err != nil {
		return nil, err
	}
	eop, finish := ps.allreduceOp(t, o, ps.fullName(op, o.Name), inPlace)
	h, err := ps.enqueue(op, eop)
	if h != nil && finish != nil {
		h.finish = []func(engine.Tensor) Tensor{finish}
	}
	return h, err
}

// allreduceOp builds the engine op for one tensor, with the output in t
// (inPlace) or in a new tensor. With compression the op reduces a 16-bit
// copy in place and finish casts the result back (nil otherwise).
// (No closure on the uncompressed path: one capturing t cost two heap
// allocations per op, a fifth of a small async op's garbage, issue 27.)
func (ps *ProcessSet) allreduceOp(t Tensor, o ReduceOptions, name string, inPlace bool) (*engine.Op, func(engine.Tensor) Tensor) {
	wire, back := o.Compression.compress(t)
	if back == nil {
		out := t
		if !inPlace {
			out = newLike(t)
		}
		return ps.reduceOp(engine.Allreduce, t, out, o, name), nil
	}
	return ps.reduceOp(engine.Allreduce, wire, wire, o, name), func(w engine.Tensor) Tensor {
		out := t
		if !inPlace {
			out = newLike(t)
		}
		back(fromEngine(w), out)
		return out
	}
}

// newLike is a zeroed tensor of t's dtype and shape.
func newLike(t Tensor) Tensor {
	return Tensor{Data: make([]byte, len(t.Data)), DType: t.DType, Shape: cloneShape(t.Shape)}
}

// Allreduce returns a new tensor holding the reduction of t over the set.
func (ps *ProcessSet) Allreduce(t Tensor, o ReduceOptions) (Tensor, error) {
	return wait(ps.AllreduceAsync(t, o))
}

// AllreduceInPlace reduces t's memory in place (Horovod's allreduce_).
func (ps *ProcessSet) AllreduceInPlace(t Tensor, o ReduceOptions) error {
	_, err := wait(ps.AllreduceInPlaceAsync(t, o))
	return err
}

// GroupedAllreduceAsync enqueues several allreduces atomically; they are
// negotiated as a group (released together, fused when they fit) and the
// handle completes when all of them have. Outputs are new tensors; names
// are "<name>_<i>of<N>" as in Horovod.
func (ps *ProcessSet) GroupedAllreduceAsync(ts []Tensor, o ReduceOptions) (*Handle, error) {
	return ps.grouped("grouped_allreduce", o.Name, ts, func(op string, t Tensor) error {
		if err := t.validate(op); err != nil {
			return err
		}
		return o.check(op, t)
	}, func(t Tensor, name string) (*engine.Op, func(engine.Tensor) Tensor) {
		return ps.allreduceOp(t, o, name, false)
	})
}

// GroupedAllreduce is GroupedAllreduceAsync then Wait; it returns the outputs.
func (ps *ProcessSet) GroupedAllreduce(ts []Tensor, o ReduceOptions) ([]Tensor, error) {
	return waitAll(ps.GroupedAllreduceAsync(ts, o))
}

// AllgatherAsync enqueues a concatenation of every member's t along
// dimension 0, in set-rank order. Dimension 0 may differ per rank; the
// dtype, the number of dimensions and the other dimensions must match.
func (ps *ProcessSet) AllgatherAsync(t Tensor, name string, opts ...Option) (*Handle, error) {
	const op = "allgather"
	o := collectOptions(opts)
	if err := ps.gatherable(op, t); err != nil {
		return nil, err
	}
	if err := checkPriority(op, o.priority); err != nil {
		return nil, err
	}
	return ps.enqueue(op, &engine.Op{Type: engine.Allgather, Name: ps.fullName(op, name), In: toEngine(t), Priority: int32(o.priority)})
}

func (ps *ProcessSet) gatherable(op string, t Tensor) error {
	if err := t.validate(op); err != nil {
		return err
	}
	if len(t.Shape) == 0 {
		return fmt.Errorf("%w: %s: a 0-dimensional tensor cannot be gathered along dimension 0", ErrInvalidArgument, op)
	}
	return nil
}

// Allgather is AllgatherAsync with an automatic name, then Wait.
func (ps *ProcessSet) Allgather(t Tensor) (Tensor, error) { return wait(ps.AllgatherAsync(t, "")) }

// GroupedAllgatherAsync enqueues allgathers of several tensors atomically.
func (ps *ProcessSet) GroupedAllgatherAsync(ts []Tensor, name string, opts ...Option) (*Handle, error) {
	o := collectOptions(opts)
	return ps.grouped("grouped_allgather", name, ts, func(op string, t Tensor) error {
		if err := ps.gatherable(op, t); err != nil {
			return err
		}
		return checkPriority(op, o.priority)
	}, func(t Tensor, name string) (*engine.Op, func(engine.Tensor) Tensor) {
		return &engine.Op{Type: engine.Allgather, Name: name, In: toEngine(t), Priority: int32(o.priority)}, nil
	})
}

// BroadcastAsync enqueues an in-place broadcast of root's t (root is a
// global rank and must be a member of the set).
func (ps *ProcessSet) BroadcastAsync(t Tensor, root int, name string, opts ...Option) (*Handle, error) {
	const op = "broadcast"
	o := collectOptions(opts)
	if err := t.validate(op); err != nil {
		return nil, err
	}
	if err := checkPriority(op, o.priority); err != nil {
		return nil, err
	}
	sroot, err := ps.setRankOf(op, "root rank", root)
	if err != nil {
		return nil, err
	}
	return ps.enqueue(op, &engine.Op{Type: engine.Broadcast, Name: ps.fullName(op, name), In: toEngine(t), Out: toEngine(t), Root: sroot, Priority: int32(o.priority)})
}

// Broadcast overwrites t on every member with root's t, in place.
func (ps *ProcessSet) Broadcast(t Tensor, root int) error {
	_, err := wait(ps.BroadcastAsync(t, root, ""))
	return err
}

// AlltoallAsync enqueues an alltoall: splits[j] rows of t (dimension 0, in
// order) go to the j-th member; the output holds the rows received from
// every member in set-rank order, ReceivedSplits how many from each.
// splits == nil divides dim 0 evenly (it must be divisible by the set size);
// sum(splits) may be less than dim 0 (the rest is not sent), as in Horovod.
func (ps *ProcessSet) AlltoallAsync(t Tensor, splits []int32, name string, opts ...Option) (*Handle, error) {
	const op = "alltoall"
	o := collectOptions(opts)
	if err := t.validate(op); err != nil {
		return nil, err
	}
	if err := checkPriority(op, o.priority); err != nil {
		return nil, err
	}
	if len(t.Shape) == 0 {
		return nil, fmt.Errorf("%w: %s: a 0-dimensional tensor has no rows to split", ErrInvalidArgument, op)
	}
	if err := ps.usable(op); err != nil {
		return nil, err
	}
	n := ps.Size()
	d0 := t.Shape[0]
	if splits == nil {
		if d0%int64(n) != 0 {
			return nil, fmt.Errorf("%w: %s: dimension 0 (%d) is not divisible by the process set size (%d); pass splits", ErrInvalidArgument, op, d0, n)
		}
		splits = make([]int32, n)
		for i := range splits {
			splits[i] = int32(d0 / int64(n))
		}
	}
	if len(splits) != n {
		return nil, fmt.Errorf("%w: %s: splits has %d entries, want one per member of the process set (%d)", ErrInvalidArgument, op, len(splits), n)
	}
	var sum int64
	for i, s := range splits {
		if s < 0 {
			return nil, fmt.Errorf("%w: %s: splits[%d] = %d is negative", ErrInvalidArgument, op, i, s)
		}
		sum += int64(s)
	}
	if sum > d0 {
		return nil, fmt.Errorf("%w: %s: splits add up to %d rows but the tensor has %d", ErrInvalidArgument, op, sum, d0)
	}
	return ps.enqueue(op, &engine.Op{Type: engine.Alltoall, Name: ps.fullName(op, name), In: toEngine(t), Splits: append([]int32(nil), splits...), Priority: int32(o.priority)})
}

// Alltoall is AlltoallAsync with an automatic name, then Wait; it returns
// the output and the received splits.
func (ps *ProcessSet) Alltoall(t Tensor, splits []int32) (Tensor, []int32, error) {
	h, err := ps.AlltoallAsync(t, splits, "")
	if err != nil {
		return Tensor{}, nil, err
	}
	out, err := h.Wait()
	if err != nil {
		return Tensor{}, nil, err
	}
	return out, h.ReceivedSplits(), nil
}

// ReducescatterAsync enqueues a reduction of t whose result is split by
// rows: rank r of n gets ⌊d0/n⌋+1 rows if r < d0 mod n, else ⌊d0/n⌋
// (Horovod's split). Only Sum and Average; t is not modified.
func (ps *ProcessSet) ReducescatterAsync(t Tensor, o ReduceOptions) (*Handle, error) {
	const op = "reducescatter"
	if err := ps.scatterable(op, t, o); err != nil {
		return nil, err
	}
	wire, back := o.Compression.compress(t)
	h, err := ps.enqueue(op, ps.reduceOp(engine.Reducescatter, wire, Tensor{}, o, ps.fullName(op, o.Name)))
	if h != nil {
		h.finish = []func(engine.Tensor) Tensor{uncompressRows(t.DType, back)}
	}
	return h, err
}

func (ps *ProcessSet) scatterable(op string, t Tensor, o ReduceOptions) error {
	if err := t.validate(op); err != nil {
		return err
	}
	if err := o.Compression.valid(); err != nil {
		return err
	}
	if err := checkPriority(op, o.Priority); err != nil {
		return err
	}
	if o.Op != Sum && o.Op != Average {
		return fmt.Errorf("%w: %s only supports Average and Sum, not %v", ErrInvalidArgument, op, o.Op)
	}
	if len(t.Shape) == 0 {
		return fmt.Errorf("%w: %s: a 0-dimensional tensor has no rows to scatter", ErrInvalidArgument, op)
	}
	if t.DType == Bool {
		return fmt.Errorf("%w: %s does not support bool tensors", ErrInvalidArgument, op)
	}
	return nil
}

// Reducescatter is ReducescatterAsync then Wait.
func (ps *ProcessSet) Reducescatter(t Tensor, o ReduceOptions) (Tensor, error) {
	return wait(ps.ReducescatterAsync(t, o))
}

// GroupedReducescatterAsync enqueues reducescatters of several tensors
// atomically.
func (ps *ProcessSet) GroupedReducescatterAsync(ts []Tensor, o ReduceOptions) (*Handle, error) {
	return ps.grouped("grouped_reducescatter", o.Name, ts, func(op string, t Tensor) error {
		return ps.scatterable(op, t, o)
	}, func(t Tensor, name string) (*engine.Op, func(engine.Tensor) Tensor) {
		wire, back := o.Compression.compress(t)
		return ps.reduceOp(engine.Reducescatter, wire, Tensor{}, o, name), uncompressRows(t.DType, back)
	})
}

// grouped enqueues one op per tensor atomically as a Horovod group: every
// tensor is checked first (so a bad one consumes no automatic name), names
// are "<base>_<i>of<N>", and the handle completes when all have.
func (ps *ProcessSet) grouped(op, name string, ts []Tensor, check func(op string, t Tensor) error,
	build func(t Tensor, name string) (*engine.Op, func(engine.Tensor) Tensor)) (*Handle, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w: %s of no tensors", ErrInvalidArgument, op)
	}
	for _, t := range ts {
		if err := check(op, t); err != nil {
			return nil, err
		}
	}
	base := ps.fullName(op, name)
	ops := make([]*engine.Op, len(ts))
	finish := make([]func(engine.Tensor) Tensor, len(ts))
	for i, t := range ts {
		ops[i], finish[i] = build(t, fmt.Sprintf("%s_%dof%d", base, i+1, len(ts)))
		ops[i].Group, ops[i].GroupSize = base, len(ts)
	}
	h, err := ps.enqueue(op, ops...)
	if h != nil {
		h.finish = finish
	}
	return h, err
}

// uncompressRows casts a reducescatter's 16-bit result back to dt (nil when
// nothing was compressed).
func uncompressRows(dt DType, back func(wire, dst Tensor)) func(engine.Tensor) Tensor {
	if back == nil {
		return nil
	}
	return func(w engine.Tensor) Tensor {
		out := Tensor{Data: make([]byte, len(w.Data)/2*dt.Size()), DType: dt, Shape: w.Shape}
		back(fromEngine(w), out)
		return out
	}
}

// Barrier returns once every member of the set has called it.
func (ps *ProcessSet) Barrier() error {
	_, err := wait(ps.enqueue("barrier", &engine.Op{Type: engine.Barrier, Name: "barrier.noname"}))
	return err
}

func wait(h *Handle, err error) (Tensor, error) {
	if err != nil {
		return Tensor{}, err
	}
	return h.Wait()
}

func waitAll(h *Handle, err error) ([]Tensor, error) {
	if err != nil {
		return nil, err
	}
	if _, err := h.Wait(); err != nil {
		return nil, err
	}
	return h.Outputs(), nil
}

// wrapErr adds the operation and process set to an error.
func (ps *ProcessSet) wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &opError{prefix: fmt.Sprintf("hvd: %s on process set %d %v: ", op, ps.id, ps.ranks), err: err}
}

// opError is an error with the operation and set in front; the wrapped
// error's own "hvd: " is dropped from the text (one prefix per message).
type opError struct {
	prefix string
	err    error
}

func (e *opError) Error() string { return e.prefix + strings.TrimPrefix(e.err.Error(), "hvd: ") }
func (e *opError) Unwrap() error { return e.err }
