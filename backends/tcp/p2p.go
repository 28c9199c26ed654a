package tcp

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

func (c *Comm) checkPeer(what string, r int) error {
	if r < 0 || r >= c.size || r == c.rank {
		return fmt.Errorf("%w: %s rank %d (communicator size %d, this rank %d)", backends.ErrInvalidArgument, what, r, c.size, c.rank)
	}
	return nil
}

// Send implements backends.Communicator. It returns once the whole message
// is in the kernel's socket buffer, which for large messages means the
// receiver has started reading (as MPI_Send in standard mode).
func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	if err := c.checkPeer("send to", dst); err != nil {
		return err
	}
	if _, err := c.begin(false); err != nil {
		return err
	}
	defer c.end()
	p := c.peers[dst]
	x := c.sendTo(dst, kindP2P, p.p2pSent, tag, buf)
	p.p2pSent++
	return c.run("send", []*xfer{x})
}

// Recv implements backends.Communicator.
func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	if err := c.checkPeer("receive from", src); err != nil {
		return err
	}
	if _, err := c.begin(false); err != nil {
		return err
	}
	defer c.end()
	p := c.peers[src]
	x := c.recvFrom(src, kindP2P, p.p2pRecvd, tag, buf)
	p.p2pRecvd++
	return c.run("recv", []*xfer{x})
}
