package shm

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/hvdorg/hvd/backends"
)

// Point-to-point messages: the sender publishes (sequence, tag, length,
// address) in its mailbox for the receiver and waits for the receiver's
// acknowledgement; the receiver reads the bytes straight from the sender's
// buffer. One copy, rendezvous semantics: Send returns once the receiver
// has the data. Small messages (eagerBytes, 16 KiB for up to 64 ranks) are
// copied through the segment instead, and Send returns at once — when the
// previous message to that rank was consumed: one message in flight per
// pair.
//
// Each (peer, direction) has its own mailbox and counters, so a send to one
// rank, a send to another, receives and a collective may run concurrently
// from different goroutines (the SDK's non-blocking send/recv rely on it);
// calls for one peer and direction are serialised.

// mailbox is the offset of the first word of the mailbox from src to dst.
func (c *Comm) mailbox(src, dst int) int { return c.ctl(src) + ctlMailbox + 64*dst }

// ack is the offset of dst's count of messages consumed from src.
func (c *Comm) ack(dst, src int) int { return c.ctl(dst) + ctlMailbox + 64*c.size + 64*src }

// p2pBegin validates peer and takes the shared p2p lock (Close waits for
// it) and the lock of that peer and direction.
func (c *Comm) p2pBegin(op string, peer int, locks []sync.Mutex) (func(), error) {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return nil, fmt.Errorf("%w: %s rank %d in a communicator of size %d (self is %d)", backends.ErrInvalidArgument, op, peer, c.size, c.rank)
	}
	c.p2pMu.RLock()
	if err := c.usable(op); err != nil {
		c.p2pMu.RUnlock()
		return nil, err
	}
	locks[peer].Lock()
	return func() {
		locks[peer].Unlock()
		c.p2pMu.RUnlock()
	}, nil
}

// Send delivers buf to rank dst. Messages up to eagerBytes are copied into
// this rank's eager area for dst and Send returns at once (it first waits
// until dst consumed the previous message, whose area it reuses); larger
// ones are read by the receiver from buf, and Send waits for that.
func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	done, err := c.p2pBegin("send to", dst, c.sendMu)
	if err != nil {
		return err
	}
	defer done()
	c.sendSeq[dst]++
	s := c.sendSeq[dst]
	m := c.mailbox(c.rank, dst)
	a := c.seg.u64(c.ack(dst, c.rank))
	consumed := func(k uint64) func() int {
		return func() int {
			if a.Load() < k {
				return dst
			}
			return -1
		}
	}
	// The mailbox (and eager area) of message s-1 is free once dst took it.
	if err := c.await("send", consumed(s-1)); err != nil {
		return err
	}
	eager := len(buf) <= c.eagerBytes
	c.seg.u64(m + 8).Store(uint64(tag))
	c.seg.u64(m + 16).Store(uint64(len(buf)))
	if eager {
		copy(c.eagerArea(c.rank, dst, len(buf)), buf)
		c.seg.u64(m + mailMode).Store(modeEager)
	} else {
		c.seg.u64(m + 24).Store(addrOf(buf))
		c.seg.u64(m + mailMode).Store(0)
	}
	c.seg.u64(m).Store(s)
	c.ring()
	if eager {
		return nil
	}
	err = c.await("send", consumed(s))
	runtime.KeepAlive(buf) // the receiver reads it until it acknowledges
	return err
}

// Recv receives exactly len(buf) bytes from rank src.
func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	done, err := c.p2pBegin("recv from", src, c.recvMu)
	if err != nil {
		return err
	}
	defer done()
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
	if c.seg.u64(m+mailMode).Load() == modeEager {
		copy(buf, c.eagerArea(src, c.rank, n))
	} else if err := c.readPeer("recv", src, buf, uintptr(c.seg.u64(m+24).Load())); err != nil {
		return err
	}
	c.recvSeq[src] = s
	c.publishAt(c.ack(c.rank, src), s)
	return nil
}
