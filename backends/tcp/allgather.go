package tcp

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Allgatherv implements backends.Communicator. Small totals (or two ranks)
// use the direct algorithm — every rank sends its block to every other in
// one round, received straight into place. Large totals use the ring:
// n-1 steps, each rank forwarding the block it just received, fed byte by
// byte so the ring is pipelined; every rank sends and receives (n-1)/n of
// the output, the bandwidth optimum.
func (c *Comm) Allgatherv(send, recv []byte, counts []int) error {
	total, err := backends.CheckCounts("allgather counts", counts, c.size)
	if err != nil {
		return err
	}
	if len(send) != counts[c.rank] || len(recv) != total {
		return fmt.Errorf("%w: allgather: send has %d bytes (counts[%d]=%d), recv has %d (sum of counts %d)",
			backends.ErrInvalidArgument, len(send), c.rank, counts[c.rank], len(recv), total)
	}
	seq, err := c.begin(true)
	if err != nil {
		return err
	}
	defer c.end()
	off := prefixSums(counts)
	blk := func(r int) []byte { return recv[off[r] : off[r]+counts[r]] }
	copy(blk(c.rank), send)
	n, me := c.size, c.rank
	if n == 1 {
		return nil
	}
	var xs []*xfer
	// A communicator that is not a full mesh always takes the ring (its
	// neighbours only).
	if (total <= c.small || n == 2) && !c.lazy {
		for d := 1; d < n; d++ {
			peer := (me + d) % n
			xs = append(xs, c.sendTo(peer, kindAllgather, seq, 0, send), c.recvFrom(peer, kindAllgather, seq, 0, blk(peer)))
		}
		return c.run("allgather", xs)
	}
	right, left := (me+1)%n, mod(me-1, n)
	var prev *xfer
	for s := 0; s < n-1; s++ {
		sx := c.sendTo(right, kindAllgather, seq, uint32(s), blk(mod(me-s, n)))
		sx.feed = prev
		rx := c.recvFrom(left, kindAllgather, seq, uint32(s), blk(mod(me-s-1, n)))
		xs = append(xs, sx, rx)
		prev = rx
	}
	return c.run("allgather", xs)
}
