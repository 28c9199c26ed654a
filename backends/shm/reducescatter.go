package shm

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// ReduceScatter leaves in recv this rank's block of the reduction of every
// member's send buffer. Small inputs go through the slots (each rank
// reduces its block from all slots in rank order); larger ones are read
// chunk by chunk from the peers' buffers and folded into recv (own data
// first, then the peers in ring order), as in the large Allreduce.
func (c *Comm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	es := dt.Size()
	if es == 0 || !op.Valid() {
		return fmt.Errorf("%w: reducescatter with %v/%v", backends.ErrInvalidArgument, dt, op)
	}
	total, err := backends.CheckCounts("reducescatter counts", counts, c.size)
	if err != nil {
		return err
	}
	if len(send) != total*es || len(recv) != counts[c.rank]*es {
		return fmt.Errorf("%w: reducescatter: send %d bytes (want %d), recv %d bytes (want %d)", backends.ErrInvalidArgument, len(send), total*es, len(recv), counts[c.rank]*es)
	}
	const name = "reducescatter"
	if err := c.begin(name); err != nil {
		return err
	}
	defer c.end()
	t := tag(kindReduceScatter, dt, op, 0, len(send))
	viaSlot := len(send) <= c.small && c.size > 1
	c.expose(t, send, viaSlot)
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return err
	}
	addrs, err := c.peerAddrs(name, t)
	if err != nil {
		return err
	}
	mine := 0
	for r := 0; r < c.rank; r++ {
		mine += counts[r] * es
	}
	n := len(recv)
	if viaSlot {
		if c.size == 1 {
			copy(recv, send)
		} else {
			backends.ReduceTo(recv, c.slotData(0, c.k, mine+n)[mine:], c.slotData(1, c.k, mine+n)[mine:], dt, op)
			for r := 2; r < c.size; r++ {
				backends.Reduce(recv, c.slotData(r, c.k, mine+n)[mine:], dt, op)
			}
		}
		c.finish()
		return nil
	}
	copy(recv, send[mine:mine+n])
	chunk := c.chunk - c.chunk%es
	for done := 0; done < n; done += chunk {
		m := min(chunk, n-done)
		dst, tmp := recv[done:done+m], c.tmp[:m]
		for d := 1; d < c.size; d++ {
			r := (c.rank + d) % c.size
			if err := c.readPeer(name, r, tmp, addrs[r]+uintptr(mine+done)); err != nil {
				return err
			}
			backends.Reduce(dst, tmp, dt, op)
		}
	}
	c.finish()
	return c.waitReaders(name, everyone)
}
