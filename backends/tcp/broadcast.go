package tcp

import (
	"fmt"
	"math/bits"

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
	if c.lazy && len(buf) <= c.small {
		// Not a full mesh: a tree (⌈log2 n⌉ hops; from rank 0, partners only).
		rel := mod(me-root, n)
		parent, children := tree(rel, n)
		var rx *xfer
		if parent >= 0 {
			rx = c.recvFrom((parent+root)%n, kindBroadcast, seq, 0, buf)
			xs = append(xs, rx)
		}
		for _, q := range children {
			sx := c.sendTo((q+root)%n, kindBroadcast, seq, 0, buf)
			sx.feed = rx
			xs = append(xs, sx)
		}
		return c.run("broadcast", xs)
	}
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

// tree places member rel (relative to the root, which is 0) of a tree over n
// members: its parent (-1 at the root) and its children. With P the largest
// power of two ≤ n, members P…n−1 hang off member rel−P, and 0…P−1 form a
// binomial tree, whose edges join members that differ in one bit: for
// root 0 every edge joins Partners (doubling's), so the control messages of
// the engine need no other connection.
func tree(rel, n int) (parent int, children []int) {
	P := 1 << (bits.Len(uint(n)) - 1)
	if rel >= P {
		return rel - P, nil
	}
	parent = -1
	mask := 1
	for ; mask < P; mask <<= 1 {
		if rel&mask != 0 {
			parent = rel - mask
			break
		}
	}
	if rel+P < n {
		children = append(children, rel+P)
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		children = append(children, rel+mask)
	}
	return parent, children
}
