package tcp

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// ReduceScatter implements backends.Communicator with the direct algorithm:
// rank j's block is sent straight to rank j by every peer, and each rank
// reduces the incoming blocks into its output as they arrive, one sender at a
// time in the fixed order me-1, me-2, … (so results are reproducible run to
// run). Every rank sends and receives (n-1)/n of the input — the same bytes
// as a ring, in one round instead of n-1 — and the send buffer is left
// untouched.
func (c *Comm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	if err := checkReduce(send, dt, op); err != nil {
		return err
	}
	total, err := backends.CheckCounts("reducescatter counts", counts, c.size)
	if err != nil {
		return err
	}
	es := dt.Size()
	if len(send) != total*es || len(recv) != counts[c.rank]*es {
		return fmt.Errorf("%w: reducescatter: send has %d bytes (want %d), recv has %d (want %d)",
			backends.ErrInvalidArgument, len(send), total*es, len(recv), counts[c.rank]*es)
	}
	seq, err := c.begin(true)
	if err != nil {
		return err
	}
	defer c.end()
	off := prefixSums(counts)
	blk := func(r int) []byte { return send[off[r]*es : (off[r]+counts[r])*es] }
	me, n := c.rank, c.size
	if c.lazy {
		return c.reduceScatterRing(seq, send, recv, counts, dt, op)
	}
	copy(recv, blk(me))
	var xs []*xfer
	var prev *xfer
	for d := 1; d < n; d++ {
		peer := (me + d) % n
		rx := c.recvReduce(mod(me-d, n), kindReduceScatter, seq, 0, recv, dt, op)
		rx.after = prev
		xs = append(xs, c.sendTo(peer, kindReduceScatter, seq, 0, blk(peer)), rx)
		prev = rx
	}
	return c.run("reducescatter", xs)
}

// reduceScatterRing is the reducescatter of a communicator that is not a
// full mesh: n−1 steps around the ring me−1 → me → me+1 over a copy of the
// input, each send fed by the receive that reduced its block, so the same
// bytes cross as in the direct algorithm, to the neighbours only. Rank me
// ends holding block me.
func (c *Comm) reduceScatterRing(seq uint64, send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	me, n, es := c.rank, c.size, dt.Size()
	work := c.getScratch(len(send))
	copy(work, send)
	off := prefixSums(counts)
	seg := func(k int) []byte { return work[off[k]*es : (off[k]+counts[k])*es] }
	right, left := (me+1)%n, mod(me-1, n)
	xs := make([]*xfer, 0, 2*(n-1))
	var prev *xfer
	for s := 0; s < n-1; s++ {
		sx := c.sendTo(right, kindReduceScatter, seq, uint32(s), seg(mod(me-s-1, n)))
		sx.feed = prev
		rx := c.recvReduce(left, kindReduceScatter, seq, uint32(s), seg(mod(me-s-2, n)), dt, op)
		xs = append(xs, sx, rx)
		prev = rx
	}
	if err := c.run("reducescatter", xs); err != nil {
		return err
	}
	copy(recv, seg(me))
	return nil
}
