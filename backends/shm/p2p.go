package shm

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Point-to-point messages: the sender publishes (sequence, tag, length,
// address) in its mailbox for the receiver and waits for the receiver's
// acknowledgement; the receiver reads the bytes straight from the sender's
// buffer. One copy, rendezvous semantics: Send returns once the receiver
// has the data.

// mailbox is the offset of the first word of the mailbox from src to dst.
func (c *Comm) mailbox(src, dst int) int { return c.ctl(src) + ctlMailbox + 64*dst }

// ack is the offset of dst's count of messages consumed from src.
func (c *Comm) ack(dst, src int) int { return c.ctl(dst) + ctlMailbox + 64*c.size + 64*src }

// Send delivers buf to rank dst.
func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	if dst < 0 || dst >= c.size || dst == c.rank {
		return fmt.Errorf("%w: send to rank %d in a communicator of size %d (self is %d)", backends.ErrInvalidArgument, dst, c.size, c.rank)
	}
	if err := c.lock("send"); err != nil {
		return err
	}
	defer c.end()
	c.sendSeq[dst]++
	s := c.sendSeq[dst]
	m := c.mailbox(c.rank, dst)
	c.pin = buf
	c.seg.u64(m + 8).Store(uint64(tag))
	c.seg.u64(m + 16).Store(uint64(len(buf)))
	c.seg.u64(m + 24).Store(addrOf(buf))
	c.seg.u64(m).Store(s)
	c.ring()
	a := c.seg.u64(c.ack(dst, c.rank))
	err := c.await("send", func() int {
		if a.Load() < s {
			return dst
		}
		return -1
	})
	c.pin = nil
	return err
}

// Recv receives exactly len(buf) bytes from rank src.
func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	if src < 0 || src >= c.size || src == c.rank {
		return fmt.Errorf("%w: recv from rank %d in a communicator of size %d (self is %d)", backends.ErrInvalidArgument, src, c.size, c.rank)
	}
	if err := c.lock("recv"); err != nil {
		return err
	}
	defer c.end()
	s := c.recvSeq[src] + 1
	m := c.mailbox(src, c.rank)
	seq := c.seg.u64(m)
	if err := c.await("recv", func() int {
		if seq.Load() < s {
			return src
		}
		return -1
	}); err != nil {
		return err
	}
	gotTag, n := uint32(c.seg.u64(m+8).Load()), int(c.seg.u64(m+16).Load())
	if gotTag != tag || n != len(buf) {
		return c.fail("recv", src, reasonProto, fmt.Sprintf("sent %d bytes with tag %d, rank %s expects %d bytes with tag %d", n, gotTag, c.who(c.rank), len(buf), tag))
	}
	if err := c.readPeer("recv", src, buf, uintptr(c.seg.u64(m+24).Load())); err != nil {
		return err
	}
	c.recvSeq[src] = s
	c.publishAt(c.ack(c.rank, src), s)
	return nil
}
