package tcp

import (
	"math/bits"
	"slices"

	"github.com/hvdorg/hvd/backends"
)

var _ backends.StatusReducer = (*Comm)(nil)

// ReduceStatus implements backends.StatusReducer by recursive doubling:
// with P the largest power of two ≤ n, members P…n−1 first hand their
// vector to member r−P (which also sends its own the other way, so an idle
// one wakes), the first P combine with the member at distance 1, 2, 4 …
// (log2 P exchanges), and then hand the result to r+P. A member that starts
// wakes its step-0 partner, each woken member wakes its own partners in
// turn, so every member wakes as with AllgatherStatus, and each receives
// ⌈log2 n⌉ + 1 messages instead of n−1. The frames are allreduce frames
// with their own steps (tags): a member running another operation is
// reported as for any collective.
func (c *Comm) ReduceStatus(send []byte, combine func(lo, hi []byte) []byte) ([]byte, error) {
	seq, err := c.begin(true)
	if err != nil {
		return nil, err
	}
	defer c.end()
	return c.doubling("status reduce", kindAllreduce, seq, slices.Clone(send), combine)
}

// doubling is the recursive doubling of ReduceStatus over acc (which it may
// keep), also the small allreduce of a communicator that is not a full
// mesh, and its barrier (with nothing to combine): it talks only to its
// Partners. Both members
// of an exchange fold the same two values in the same order, so every
// member returns bit-identical bytes.
func (c *Comm) doubling(opName string, kind msgKind, seq uint64, acc []byte, combine func(lo, hi []byte) []byte) ([]byte, error) {
	n, r := c.size, c.rank
	if n == 1 {
		return acc, nil
	}
	P := 1 << (bits.Len(uint(n)) - 1)
	final := uint32(bits.Len(uint(P)) + 1) // the tag of the result handed to r+P
	exchange := func(p int, tag uint32) ([]byte, error) {
		in := make([]byte, len(acc))
		err := c.run(opName, []*xfer{c.sendTo(p, kind, seq, tag, acc), c.recvFrom(p, kind, seq, tag, in)})
		return in, err
	}
	if r >= P {
		if _, err := exchange(r-P, 0); err != nil {
			return nil, err
		}
		out := make([]byte, len(acc))
		if err := c.run(opName, []*xfer{c.recvFrom(r-P, kind, seq, final, out)}); err != nil {
			return nil, err
		}
		return out, nil
	}
	if r+P < n {
		in, err := exchange(r+P, 0)
		if err != nil {
			return nil, err
		}
		acc = combine(acc, in)
	}
	for k, tag := 1, uint32(1); k < P; k, tag = k<<1, tag+1 {
		p := r ^ k
		in, err := exchange(p, tag)
		if err != nil {
			return nil, err
		}
		if r < p {
			acc = combine(acc, in)
		} else {
			acc = combine(in, acc)
		}
	}
	if r+P < n {
		if err := c.run(opName, []*xfer{c.sendTo(r+P, kind, seq, final, acc)}); err != nil {
			return nil, err
		}
	}
	return acc, nil
}
