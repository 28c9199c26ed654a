package tcp

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Broadcast implements backends.Communicator. Small messages or two ranks:
// the root sends to every rank directly (one hop of latency). Large messages
// with more ranks: a pipelined chain root → root+1 → … where each rank
// forwards bytes as soon as they arrive, so the time is ≈ S/bandwidth
// instead of (n-1)·S/bandwidth for the root sending n-1 copies.
func (c *Comm) Broadcast(buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: broadcast root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	seq, err := c.begin(true)
	if err != nil {
		return err
	}
	defer c.end()
	n, me := c.size, c.rank
	if n == 1 {
		return nil
	}
	var xs []*xfer
	if len(buf) <= c.small || n == 2 {
		if me == root {
			for d := 1; d < n; d++ {
				xs = append(xs, c.sendTo((me+d)%n, kindBroadcast, seq, 0, buf))
			}
		} else {
			xs = append(xs, c.recvFrom(root, kindBroadcast, seq, 0, buf))
		}
		return c.run("broadcast", xs)
	}
	rel := mod(me-root, n)
	var rx *xfer
	if rel > 0 {
		rx = c.recvFrom(mod(me-1, n), kindBroadcast, seq, 1, buf)
		xs = append(xs, rx)
	}
	if rel < n-1 {
		sx := c.sendTo((me+1)%n, kindBroadcast, seq, 1, buf)
		sx.feed = rx
		xs = append(xs, sx)
	}
	return c.run("broadcast", xs)
}
