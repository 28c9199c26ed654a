package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// Control messages for the engine's negotiation: variable-length gather to
// and broadcast from one rank. The receiver learns the length from the frame
// header (bounded by maxMsgBytes), so nobody has to agree on sizes first and
// each costs a single hop.
const maxMsgBytes = 256 << 20

// GatherMsgs implements backends.Messenger: every member sends msg to root;
// root returns all messages indexed by rank (its own included), the others
// return nil.
func (c *Comm) GatherMsgs(msg []byte, root int) ([][]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("%w: gather root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	seq, err := c.begin(true)
	if err != nil {
		return nil, err
	}
	defer c.end()
	if c.lazy {
		return c.gatherTree(seq, msg, root)
	}
	if c.rank != root {
		return nil, c.run("gather", []*xfer{c.sendTo(root, kindGather, seq, 0, msg)})
	}
	out := make([][]byte, c.size)
	out[root] = msg
	xs := make([]*xfer, 0, c.size-1)
	for d := 1; d < c.size; d++ {
		x := c.recvFrom((root+d)%c.size, kindGather, seq, 0, nil)
		x.anyLen = true
		xs = append(xs, x)
	}
	if err := c.run("gather", xs); err != nil {
		return nil, err
	}
	for _, x := range xs {
		out[x.p.rank] = x.data
	}
	return out, nil
}

// BcastMsg implements backends.Messenger: root's msg, of any length, is
// returned on every member.
func (c *Comm) BcastMsg(msg []byte, root int) ([]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("%w: broadcast root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	seq, err := c.begin(true)
	if err != nil {
		return nil, err
	}
	defer c.end()
	if c.lazy {
		return c.bcastTree(seq, msg, root)
	}
	if c.rank == root {
		xs := make([]*xfer, 0, c.size-1)
		for d := 1; d < c.size; d++ {
			xs = append(xs, c.sendTo((root+d)%c.size, kindBcastMsg, seq, 0, msg))
		}
		return msg, c.run("broadcast", xs)
	}
	x := c.recvFrom(root, kindBcastMsg, seq, 0, nil)
	x.anyLen = true
	if err := c.run("broadcast", []*xfer{x}); err != nil {
		return nil, err
	}
	return x.data, nil
}

// gatherTree is GatherMsgs of a communicator that is not a full mesh: up a
// tree (from root 0: partners only), each member forwarding its own message and
// its subtree's, each prefixed with its rank and length, in one message.
func (c *Comm) gatherTree(seq uint64, msg []byte, root int) ([][]byte, error) {
	n := c.size
	parent, children := tree(mod(c.rank-root, n), n)
	xs := make([]*xfer, len(children))
	for i, q := range children {
		xs[i] = c.recvFrom((q+root)%n, kindGather, seq, 0, nil)
		xs[i].anyLen = true
	}
	if err := c.run("gather", xs); err != nil {
		return nil, err
	}
	if parent >= 0 {
		packed := appendPacked(nil, c.rank, msg)
		for _, x := range xs {
			packed = append(packed, x.data...)
		}
		return nil, c.run("gather", []*xfer{c.sendTo((parent+root)%n, kindGather, seq, 0, packed)})
	}
	out := make([][]byte, n)
	out[root] = msg
	for _, x := range xs {
		for b := x.data; len(b) > 0; {
			if len(b) < 12 {
				return nil, c.fail("gather", x.p, fmt.Errorf("corrupt stream: %d bytes left of a gathered message", len(b)))
			}
			r, l := int(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint64(b[4:])
			if r >= n || l > uint64(len(b)-12) {
				return nil, c.fail("gather", x.p, fmt.Errorf("corrupt stream: gathered message of rank %d, %d bytes", r, l))
			}
			out[r] = b[12 : 12+l]
			b = b[12+l:]
		}
	}
	return out, nil
}

// appendPacked appends rank's msg to b as gatherTree forwards it.
func appendPacked(b []byte, rank int, msg []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(msg)))
	return append(b, msg...)
}

// bcastTree is BcastMsg of a communicator that is not a full mesh: down a
// tree (from root 0: partners only).
func (c *Comm) bcastTree(seq uint64, msg []byte, root int) ([]byte, error) {
	n := c.size
	parent, children := tree(mod(c.rank-root, n), n)
	if parent >= 0 {
		x := c.recvFrom((parent+root)%n, kindBcastMsg, seq, 0, nil)
		x.anyLen = true
		if err := c.run("broadcast", []*xfer{x}); err != nil {
			return nil, err
		}
		msg = x.data
	}
	xs := make([]*xfer, len(children))
	for i, q := range children {
		xs[i] = c.sendTo((q+root)%n, kindBcastMsg, seq, 0, msg)
	}
	return msg, c.run("broadcast", xs)
}

// Idle implements backends.Idler: it blocks until a peer has sent something
// (or closed its connection), Kick is called, timeout passes (< 0: no
// limit), or the communicator is closed. It consumes nothing. It must be
// called by the communicator's single user goroutine, between operations.
func (c *Comm) Idle(timeout time.Duration) (incoming bool, err error) {
	// Not c.mu: an operation may run meanwhile (poll only observes). Close
	// signals wakeFd, then waits on idleMu for this to return.
	c.idleMu.RLock()
	defer c.idleMu.RUnlock()
	if c.closed.Load() {
		return false, fmt.Errorf("hvd: tcp: %w", backends.ErrClosed)
	}
	if c.isBroken() {
		return true, nil // let the next operation report it
	}
	if c.buffered() {
		return true, nil // already received (encrypted connections read ahead)
	}
	pfds := make([]unix.PollFd, 0, c.size+3)
	pfds = append(pfds, unix.PollFd{Fd: int32(c.wakeFd), Events: unix.POLLIN}, unix.PollFd{Fd: int32(c.kickFd), Events: unix.POLLIN})
	if c.lazy {
		// A peer that connects now is starting an operation with this
		// rank: install signals idleConnFd after adding it (drained first,
		// so only a connection the snapshot below lacks wakes Idle).
		var b [8]byte
		unix.Read(c.idleConnFd, b[:])
		pfds = append(pfds, unix.PollFd{Fd: int32(c.idleConnFd), Events: unix.POLLIN})
	}
	c.connMu.Lock()
	for _, p := range c.peers {
		if p != nil {
			pfds = append(pfds, unix.PollFd{Fd: int32(p.fd), Events: unix.POLLIN})
		}
	}
	c.connMu.Unlock()
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		_, err := unix.Poll(pfds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("hvd: tcp: poll: %w", err)
		}
		break
	}
	if c.closed.Load() {
		return false, fmt.Errorf("hvd: tcp: %w", backends.ErrClosed)
	}
	if pfds[1].Revents != 0 {
		// Drained, then cleared: a Kick before the clear skipped its write,
		// but its caller queued work before it, and Idle's caller looks
		// for work before idling again; a Kick after it writes. (Cleared
		// first, a Kick between the two would have its write drained and
		// leave the flag set with nothing pending: every later Kick lost.)
		var b [8]byte
		unix.Read(c.kickFd, b[:])
		c.kicked.Store(false)
	}
	for _, p := range pfds[2:] {
		if p.Revents != 0 {
			return true, nil
		}
	}
	if c.buffered() {
		return true, nil
	}
	return false, nil
}

// Kick wakes a goroutine blocked in Idle; safe from any goroutine.
func (c *Comm) Kick() {
	if c.kicked.Swap(true) {
		return // a signal is pending already: one write per wake-up, not per enqueue
	}
	var one [8]byte
	one[0] = 1
	unix.Write(c.kickFd, one[:])
}
