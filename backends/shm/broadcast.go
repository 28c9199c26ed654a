package shm

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Broadcast copies root's buf into every member's buf: through root's slot
// up to SmallBytes, else every member reads root's buffer directly (root
// returns once all have).
func (c *Comm) Broadcast(buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: broadcast root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	const name = "broadcast"
	if err := c.begin(name); err != nil {
		return err
	}
	defer c.end()
	t := tag(kindBroadcast, 0, 0, root, len(buf))
	viaSlot := len(buf) <= c.small
	if c.rank == root {
		c.expose(t, buf, viaSlot)
		c.finish()
		if viaSlot {
			return nil
		}
		return c.waitReaders(name, everyone)
	}
	c.writeSlot(t, 0, 0, 0)
	c.enter()
	if err := c.await(name, c.oneWord(root, ctlSeq, c.k)); err != nil {
		return err
	}
	_, mode, addr, err := c.peerSlot(name, root, t)
	if err != nil {
		return err
	}
	if err := c.fetch(name, root, mode, addr, 0, buf); err != nil {
		return err
	}
	c.finish()
	return nil
}
