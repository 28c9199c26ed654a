package shm

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Alltoallv: every rank publishes its send buffer and its send counts;
// rank j then copies its part of every peer's buffer into recv. Each sender
// chooses the slot (whole send buffer within SmallBytes) or direct reads;
// the readers follow what the slot header says.
func (c *Comm) Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	stotal, err := backends.CheckCounts("alltoall send counts", sendCounts, c.size)
	if err != nil {
		return err
	}
	rtotal, err := backends.CheckCounts("alltoall recv counts", recvCounts, c.size)
	if err != nil {
		return err
	}
	if len(send) != stotal || len(recv) != rtotal {
		return fmt.Errorf("%w: alltoall: send %d bytes (counts sum to %d), recv %d bytes (counts sum to %d)", backends.ErrInvalidArgument, len(send), stotal, len(recv), rtotal)
	}
	const name = "alltoall"
	if err := c.begin(name); err != nil {
		return err
	}
	defer c.end()
	h, _ := c.slot(c.rank, c.k)
	for j, n := range sendCounts {
		c.seg.u64(h + slotCounts + 8*j).Store(uint64(n))
	}
	viaSlot := stotal <= c.small
	t := tag(kindAlltoall, 0, 0, 0, 0)
	c.expose(t, send, viaSlot)
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return err
	}
	roff := 0
	for r := 0; r < c.size; r++ {
		dst := recv[roff : roff+recvCounts[r]]
		roff += recvCounts[r]
		// Where is my part in r's buffer?
		var soff, n int
		if r == c.rank {
			for j := 0; j < c.rank; j++ {
				soff += sendCounts[j]
			}
			copy(dst, send[soff:soff+sendCounts[c.rank]])
			continue
		}
		_, mode, addr, err := c.peerSlot(name, r, t)
		if err != nil {
			return err
		}
		ph, _ := c.slot(r, c.k)
		for j := 0; j < c.rank; j++ {
			soff += int(c.seg.u64(ph + slotCounts + 8*j).Load())
		}
		n = int(c.seg.u64(ph + slotCounts + 8*c.rank).Load())
		if n != recvCounts[r] {
			return c.fail(name, r, reasonProto, fmt.Sprintf("sends %d bytes to rank %s, which expects %d", n, c.who(c.rank), recvCounts[r]))
		}
		if err := c.fetch(name, r, mode, addr, soff, dst); err != nil {
			return err
		}
	}
	c.finish()
	if viaSlot {
		return nil
	}
	return c.waitReaders(name, everyone)
}
