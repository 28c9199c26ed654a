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
// has the data. Small messages (eagerBytes, 64 KiB for up to 16 ranks) are
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

// p2pBegin starts a send or receive with peer (backends.BeginP2P): the
// shared p2p lock (Close waits for it), then the lock of that peer and
// direction; it fails on a closed, broken or aborted communicator.
func (c *Comm) p2pBegin(op string, peer int, locks []sync.Mutex) (func(), error) {
	return backends.BeginP2P(op, peer, c.rank, &c.p2pMu, locks, func() error { return c.usable(op) })
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
	c.publishSend(buf, dst, tag, s)
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
	return c.consume(buf, src, tag, s)
}

// p2pTryBegin is p2pBegin without waiting for the pair's lock: ok is false
// when another op of that pair and direction is running.
func (c *Comm) p2pTryBegin(op string, peer int, locks []sync.Mutex) (done func(), ok bool, err error) {
	if err := backends.CheckPeer(op, peer, c.rank, c.size); err != nil {
		return nil, false, err
	}
	if !c.p2pMu.TryRLock() {
		return nil, false, nil
	}
	if err := c.usable(op); err != nil {
		c.p2pMu.RUnlock()
		return nil, false, err
	}
	if !locks[peer].TryLock() {
		c.p2pMu.RUnlock()
		return nil, false, nil
	}
	return func() {
		locks[peer].Unlock()
		c.p2pMu.RUnlock()
	}, true, nil
}

// TrySend implements backends.P2PTrier: an eager message (up to
// eagerBytes) is copied and published if dst consumed the previous one;
// anything else returns false at once, having done nothing.
func (c *Comm) TrySend(buf []byte, dst int, tag uint32) (bool, error) {
	if len(buf) > c.eagerBytes {
		return false, nil
	}
	_, ok, err := c.tryPublish(buf, dst, tag)
	return ok, err
}

// tryPublish publishes buf as the next message to dst if the pair is free
// and dst consumed the previous message; it returns the message's number.
func (c *Comm) tryPublish(buf []byte, dst int, tag uint32) (s uint64, ok bool, err error) {
	done, ok, err := c.p2pTryBegin("send to", dst, c.sendMu)
	if !ok {
		return 0, false, err
	}
	defer done()
	s = c.sendSeq[dst] + 1
	if c.seg.u64(c.ack(dst, c.rank)).Load() < s-1 {
		return 0, false, nil
	}
	c.sendSeq[dst] = s
	c.publishSend(buf, dst, tag, s)
	return s, true, nil
}

// publishSend writes message s for dst into the mailbox (eager: its bytes
// into the eager area; else buf's address) and rings.
func (c *Comm) publishSend(buf []byte, dst int, tag uint32, s uint64) {
	m := c.mailbox(c.rank, dst)
	c.seg.u64(m + 8).Store(uint64(tag))
	c.seg.u64(m + 16).Store(uint64(len(buf)))
	if len(buf) <= c.eagerBytes {
		copy(c.eagerArea(c.rank, dst, len(buf)), buf)
		c.seg.u64(m + mailMode).Store(modeEager)
	} else {
		c.seg.u64(m + 24).Store(addrOf(buf))
		c.seg.u64(m + mailMode).Store(0)
	}
	c.seg.u64(m).Store(s)
	c.ring()
}

// TryRecv implements backends.P2PTrier: it receives the next message from
// src if it has been published, else returns false having done nothing.
func (c *Comm) TryRecv(buf []byte, src int, tag uint32) (bool, error) {
	done, ok, err := c.p2pTryBegin("recv from", src, c.recvMu)
	if !ok {
		return false, err
	}
	defer done()
	s := c.recvSeq[src] + 1
	if c.seg.u64(c.mailbox(src, c.rank)).Load() < s {
		return false, nil
	}
	return true, c.consume(buf, src, tag, s)
}

// consume reads published message s from src into buf and acknowledges it.
func (c *Comm) consume(buf []byte, src int, tag uint32, s uint64) error {
	m := c.mailbox(src, c.rank)
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

// SendRecv implements backends.SendRecver: a send to dst and a receive from
// src (dst may equal src) progressed together on the calling goroutine, as
// MPI_Sendrecv: neither waits for the other to finish first, so two ranks
// exchanging large messages with it cannot deadlock.
func (c *Comm) SendRecv(sbuf []byte, dst int, stag uint32, rbuf []byte, src int, rtag uint32) error {
	sdone, err := c.p2pBegin("send to", dst, c.sendMu)
	if err != nil {
		return err
	}
	defer sdone()
	if err := backends.CheckPeer("receive from", src, c.rank, c.size); err != nil {
		return err
	}
	c.recvMu[src].Lock() // p2pMu is held (shared) already
	defer c.recvMu[src].Unlock()
	s := c.sendSeq[dst] + 1
	c.sendSeq[dst] = s
	r := c.recvSeq[src] + 1
	ack, seq := c.seg.u64(c.ack(dst, c.rank)), c.seg.u64(c.mailbox(src, c.rank))
	published, received := false, false
	var rerr error
	err = c.await("sendrecv", func() int {
		if !published && ack.Load() >= s-1 {
			c.publishSend(sbuf, dst, stag, s)
			published = true
		}
		if !received && seq.Load() >= r {
			rerr = c.consume(rbuf, src, rtag, r)
			received = true
			if rerr != nil {
				return -1
			}
		}
		switch {
		case !published:
			return dst
		case !received:
			return src
		case len(sbuf) > c.eagerBytes && ack.Load() < s:
			return dst
		}
		return -1
	})
	runtime.KeepAlive(sbuf)
	if rerr != nil {
		return rerr
	}
	return err
}

// PostSend implements backends.SendPoster: a message above eagerBytes is
// published (its address, for the receiver to read) if dst consumed the
// previous one, without waiting; wait then blocks until dst has read it.
// buf must not change until wait returns nil. posted is false (and nothing
// happened) when the pair is busy or dst has not consumed the previous
// message.
func (c *Comm) PostSend(buf []byte, dst int, tag uint32) (wait func() error, posted bool, err error) {
	s, ok, err := c.tryPublish(buf, dst, tag)
	if !ok {
		return nil, false, err
	}
	a := c.seg.u64(c.ack(dst, c.rank))
	return func() error {
		c.p2pMu.RLock()
		defer c.p2pMu.RUnlock()
		err := c.await("send", func() int {
			if a.Load() < s {
				return dst
			}
			return -1
		})
		runtime.KeepAlive(buf)
		return err
	}, true, nil
}
