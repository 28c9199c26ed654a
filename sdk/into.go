package sdk

import (
	"fmt"

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
	if ps == nil || ps.w == nil || !ps.w.knobs.callerDrive {
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
	if err := out.validate(op + " output"); err != nil {
		return err
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
