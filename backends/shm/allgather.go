package shm

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Allgatherv concatenates every member's send buffer in rank order into
// recv. When every contribution fits a slot (all members know all counts, so
// they agree) contributions go through the slots; otherwise every rank reads
// the others' send buffers directly into recv.
func (c *Comm) Allgatherv(send, recv []byte, counts []int) error {
	total, err := backends.CheckCounts("allgather counts", counts, c.size)
	if err != nil {
		return err
	}
	if len(send) != counts[c.rank] || len(recv) != total {
		return fmt.Errorf("%w: allgather: send %d bytes (counts say %d), recv %d bytes (counts sum to %d)", backends.ErrInvalidArgument, len(send), counts[c.rank], len(recv), total)
	}
	const name = "allgather"
	if err := c.begin(name); err != nil {
		return err
	}
	defer c.end()
	viaSlot := true
	for _, n := range counts {
		viaSlot = viaSlot && n <= c.small
	}
	c.expose(tag(kindAllgather, 0, 0, 0, total), send, viaSlot)
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return err
	}
	off := 0
	for r := 0; r < c.size; r++ {
		dst := recv[off : off+counts[r]]
		off += counts[r]
		if r == c.rank {
			copy(dst, send)
			continue
		}
		n, mode, addr, err := c.peerSlot(name, r, tag(kindAllgather, 0, 0, 0, total))
		if err != nil {
			return err
		}
		if n != counts[r] {
			return c.fail(name, r, reasonProto, fmt.Sprintf("contributes %d bytes, rank %s expected %d", n, c.who(c.rank), counts[r]))
		}
		if err := c.fetch(name, r, mode, addr, 0, dst); err != nil {
			return err
		}
	}
	c.finish()
	if viaSlot {
		return nil
	}
	return c.waitReaders(name, everyone)
}
