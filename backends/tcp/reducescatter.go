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
