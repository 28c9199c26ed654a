package tcp

import (
	"fmt"
	"sync"

	"github.com/hvdorg/hvd/backends"
)

// p2pBegin starts a send or receive with r (backends.BeginP2P): mu shared,
// so Close and collectives wait for the op, then the lock of the peer and
// direction; it fails on a closed or broken communicator.
func (c *Comm) p2pBegin(what string, r int, locks []sync.Mutex) (func(), error) {
	return backends.BeginP2P(what, r, c.rank, &c.mu, locks, func() error {
		if c.closed.Load() {
			return fmt.Errorf("hvd: tcp: %w", backends.ErrClosed)
		}
		if err := c.broken.Load(); err != nil {
			return err
		}
		return nil
	})
}

// Send implements backends.Communicator. It returns once the whole message
// is in the kernel's socket buffer, which for large messages means the
// receiver has started reading (as MPI_Send in standard mode). Sends and
// receives to different peers or in different directions may run
// concurrently (each drives its own socket direction).
func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	done, err := c.p2pBegin("send to", dst, c.sendMu)
	if err != nil {
		return err
	}
	defer done()
	x := c.sendTo(dst, kindP2P, c.p2pSent[dst], tag, buf)
	c.p2pSent[dst]++
	return c.run("send", []*xfer{x})
}

// Recv implements backends.Communicator.
func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	done, err := c.p2pBegin("receive from", src, c.recvMu)
	if err != nil {
		return err
	}
	defer done()
	x := c.recvFrom(src, kindP2P, c.p2pRecvd[src], tag, buf)
	c.p2pRecvd[src]++
	return c.run("recv", []*xfer{x})
}

// SendRecv implements backends.SendRecver: both transfers in one progress
// loop on the calling goroutine.
func (c *Comm) SendRecv(sbuf []byte, dst int, stag uint32, rbuf []byte, src int, rtag uint32) error {
	sdone, err := c.p2pBegin("send to", dst, c.sendMu)
	if err != nil {
		return err
	}
	defer sdone()
	if err := backends.CheckPeer("receive from", src, c.rank, c.size); err != nil {
		return err
	}
	c.recvMu[src].Lock() // mu is held (shared) already
	defer c.recvMu[src].Unlock()
	xs := c.sendTo(dst, kindP2P, c.p2pSent[dst], stag, sbuf)
	c.p2pSent[dst]++
	xr := c.recvFrom(src, kindP2P, c.p2pRecvd[src], rtag, rbuf)
	c.p2pRecvd[src]++
	return c.run("sendrecv", []*xfer{xs, xr})
}
