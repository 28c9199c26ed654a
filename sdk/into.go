package sdk

import (
	"fmt"
	"runtime"

	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// Collectives whose output is caller-owned memory (the C ABI's zero-copy
// path: a framework allocates the output tensor, the engine writes it).

// AllreduceIntoAsync enqueues an allreduce of t whose result is written into
// out, which must have t's dtype and shape and may alias t (in place).
// Neither t nor out may be touched until Wait returns. Compression is not
// applied here (frameworks compress before calling).
func (ps *ProcessSet) AllreduceIntoAsync(t, out Tensor, o ReduceOptions) (*Handle, error) {
	const op = "allreduce"
	if err := checkInto(op, t, out, o); err != nil {
		return nil, err
	}
	return ps.enqueue(op, ps.reduceOp(engine.Allreduce, t, out, o, ps.fullName(op, o.Name)))
}

// AllreduceIntoDriving is AllreduceIntoAsync then Handle.WaitDriving,
// without a handle, for a goroutine locked to its OS thread (the C ABI's
// synchronous allreduce): when the set's engine is only polling for work,
// the calling goroutine runs the op's negotiation round and collective
// itself, and the engine goroutine cannot start that round in between.
//
// Only with HVD_CALLER_ROUNDS=1; otherwise it is AllreduceIntoAsync then
// WaitFromC (measured here: faster at np 4 on 2 cores, slower at np 2 while other
// processes loaded the machine — issue 18's notes in docs/performance.md).
func (ps *ProcessSet) AllreduceIntoDriving(t, out Tensor, o ReduceOptions) error {
	if !ps.callerRounds() {
		h, err := ps.AllreduceIntoAsync(t, out, o)
		if err == nil {
			_, err = h.WaitFromC()
		}
		return err
	}
	held := ps.eng != nil && ps.eng.TryHold()
	h, err := ps.AllreduceIntoAsync(t, out, o)
	if held {
		var eh *engine.Handle
		if err == nil {
			eh = h.ops[0].Handle()
		}
		ps.eng.DriveHeld(eh)
	}
	if err != nil {
		return err
	}
	_, err = h.WaitDriving()
	return err
}

// GroupedAllreduceIntoAsync is GroupedAllreduceAsync with caller-owned
// outputs (outs[i] for ts[i], same dtype and shape, may alias).
func (ps *ProcessSet) GroupedAllreduceIntoAsync(ts, outs []Tensor, o ReduceOptions) (*Handle, error) {
	const op = "grouped_allreduce"
	if len(outs) != len(ts) {
		return nil, fmt.Errorf("%w: %s: %d tensors but %d outputs", ErrInvalidArgument, op, len(ts), len(outs))
	}
	for k, t := range ts {
		if err := checkInto(op, t, outs[k], o); err != nil {
			return nil, fmt.Errorf("%w (tensor %d of %d)", err, k+1, len(ts))
		}
	}
	next := 0 // grouped builds the ops in input order
	return ps.grouped(op, o.Name, ts, func(string, Tensor) error { return nil },
		func(t Tensor, name string) (*engine.Op, func(engine.Tensor) Tensor) {
			out := outs[next]
			next++
			return ps.reduceOp(engine.Allreduce, t, out, o, name), nil
		})
}

func checkInto(op string, t, out Tensor, o ReduceOptions) error {
	if err := t.validate(op); err != nil {
		return err
	}
	if err := out.validate(op); err != nil {
		return out.validate(op + " output") // the label only on failure (an allocation per op otherwise)
	}
	if out.DType != t.DType || len(out.Data) != len(t.Data) {
		return fmt.Errorf("%w: %s: the output (%v, %d bytes) does not match the input (%v, %d bytes)",
			ErrInvalidArgument, op, out.DType, len(out.Data), t.DType, len(t.Data))
	}
	if o.Compression != CompressionNone {
		return fmt.Errorf("%w: %s: compression is applied by the caller on this path", ErrInvalidArgument, op)
	}
	return o.check(op, t)
}

// AllreduceManyIntoAsync enqueues one allreduce per tensor — ts[i] into
// outs[i] (same dtype and shape, may alias), named names[i] ("" takes an
// automatic name), with priority prios[i] and o's op and scaling — as
// len(ts) AllreduceIntoAsync calls would, but in one submission to the
// engine: one lock, one wake-up (a framework's gradients of one backward
// pass, issue 27). Every op is checked before any is enqueued; on an error
// none is. Each op gets its own handle, as from AllreduceIntoAsync.
//
// With drive and HVD_CALLER_ROUNDS=1 (experimental), when the set's engine
// is only polling for work or asleep in a shared Idle, the calling
// goroutine (locked to a C caller's thread) runs the rounds until the last
// op completes, so that the engine goroutine does not start them between
// the enqueue and the caller's wait (see AllreduceIntoDriving).
func (ps *ProcessSet) AllreduceManyIntoAsync(ts, outs []Tensor, names []string, prios []int, o ReduceOptions, drive bool) ([]*Handle, error) {
	const op = "allreduce"
	if len(outs) != len(ts) || len(names) != len(ts) || len(prios) != len(ts) {
		return nil, fmt.Errorf("%w: %s: %d tensors, %d outputs, %d names, %d priorities", ErrInvalidArgument, op,
			len(ts), len(outs), len(names), len(prios))
	}
	if len(ts) == 0 {
		return nil, nil
	}
	ops := make([]*engine.Op, len(ts))
	for i, t := range ts {
		oi := o
		oi.Name, oi.Priority = names[i], prios[i]
		if err := checkInto(op, t, outs[i], oi); err != nil {
			return nil, fmt.Errorf("%w (tensor %d of %d, %q)", err, i+1, len(ts), names[i])
		}
		ops[i] = ps.reduceOp(engine.Allreduce, t, outs[i], oi, ps.fullName(op, names[i]))
	}
	held := drive && ps.callerRounds() && ps.eng != nil && ps.eng.TryHold()
	h, err := ps.enqueue(op, ops...)
	if held {
		var last *engine.Handle
		if err == nil {
			last = ops[len(ops)-1].Handle()
		}
		ps.eng.DriveHeld(last)
	}
	if err != nil {
		return nil, err
	}
	hs := make([]*Handle, len(ops))
	for i := range ops {
		hs[i] = &Handle{ps: h.ps, op: op, ops: ops[i : i+1]}
	}
	return hs, nil
}

// WaitMany waits for every handle in order and returns the first error met
// (the handles after it are not waited for). It is for a goroutine locked
// to a C caller's thread (cmd/libhvd). With drive and HVD_CALLER_ROUNDS=1
// each wait is WaitDriving's (the caller runs rounds while the engine only
// polls or sleeps in a shared Idle). When the runtime has one processor (a
// framework process, or a bound rank) the caller sleeps in the kernel
// without holding it, and the round that completes its op wakes it with
// one futex wake once the round is over (engine.Handle.WaitBlocking):
// parked instead, its thread would wait for the runtime's monitor to hand
// it the processor (issue 27). Otherwise each wait is Wait's.
func WaitMany(hs []*Handle, drive bool) error {
	mode := waitPlain
	if drive && len(hs) > 0 && hs[0].ps.callerRounds() {
		mode = waitDriving
	} else if runtime.GOMAXPROCS(0) == 1 {
		mode = waitBlocking
	}
	for _, h := range hs {
		if _, err := h.wait(mode); err != nil {
			return err
		}
	}
	return nil
}

// callerRounds says whether callers that ask to run the set's rounds may
// (HVD_CALLER_ROUNDS=1, experimental).
func (ps *ProcessSet) callerRounds() bool {
	return ps != nil && ps.w != nil && ps.w.knobs.callerDrive
}
