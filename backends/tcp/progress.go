package tcp

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// The progress engine. A collective is expressed as a list of transfers
// (sends and receives, each to one peer); run() drives all of them on the
// calling goroutine with non-blocking readv/writev on the sockets, in the
// style of an MPI progress engine:
//
//   - No goroutine per connection and no hand-off between threads: on this
//     class of machine a thread wake-up costs more than a small collective
//     (see docs/performance.md), and every byte still crosses the kernel on
//     the caller's core, so one thread loses nothing in bandwidth.
//   - Transfers to one peer form a FIFO (a TCP stream is ordered); the head of
//     each FIFO progresses independently, so sends and receives on all
//     connections overlap and two ranks sending large buffers to each other
//     cannot deadlock.
//   - Dependencies make pipelines: a send may be "fed" by a receive (it only
//     sends bytes the receive has already finished: reduced, or stored), and
//     a transfer may wait "after" another completes. A ring allreduce is
//     therefore posted in one go and streams chunk by chunk.
//   - When nothing moves, the loop spins for Config.Spin (a blocking wake-up
//     through poll costs ≈10 µs here, spinning ≈1 µs), then blocks in poll(2)
//     on exactly the descriptors that can make progress, plus a wake-up
//     eventfd used by Close. Spin is 0 when ranks outnumber cores, so
//     oversubscribed jobs stay fair.
type xfer struct {
	rank   int   // the peer's rank
	p      *peer // its connection; nil until a lazy communicator has it
	send   bool
	h      header
	hb     [hdrLen]byte // encoded header (send) or received bytes (recv)
	hoff   int
	data   []byte // send source, or receive destination when red == nil
	doff   int
	red    *reducer // receive-and-reduce into red.dst through a scratch ring
	feed   *xfer    // send: only bytes feed has finished may be sent
	after  *xfer    // must complete before this one starts
	anyLen bool     // receive: the length comes from the header (control messages)
	prev   *xfer    // previous transfer on the same stream (set by run)
	done   bool
}

// finished is the number of payload bytes that are final: received and (for
// a reducing receive) reduced, or sent.
func (x *xfer) finished() int {
	if x.red != nil {
		return x.red.reduced
	}
	return x.doff
}

// ready reports whether x may move now: it heads its stream and its
// dependency is complete.
func (x *xfer) ready() bool {
	return x.p != nil && (x.prev == nil || x.prev.done) && (x.after == nil || x.after.done)
}

// reducer receives into a small ring of scratch memory and folds complete
// elements into dst as soon as they arrive, so the incoming data is reduced
// while it is still in cache and no buffer the size of the message is needed.
type reducer struct {
	dst     []byte
	ring    []byte
	es      int
	dt      backends.DType
	op      backends.ReduceOp
	reduced int
}

// window is where the next read may land in the ring.
func (r *reducer) window(got int) []byte {
	pos := got % len(r.ring)
	end := len(r.ring)
	if rem := len(r.dst) - got; end-pos > rem {
		end = pos + rem
	}
	return r.ring[pos:end]
}

// advance reduces every complete element received so far.
func (r *reducer) advance(got int) {
	upto := got - got%r.es
	if upto <= r.reduced {
		return
	}
	pos := r.reduced % len(r.ring)
	n := upto - r.reduced
	backends.Reduce(r.dst[r.reduced:upto], r.ring[pos:pos+n], r.dt, r.op)
	r.reduced = upto
}

// run drives xs to completion or to the first error. xs must be listed so
// that, per peer and direction, they are in stream order.
func (c *Comm) run(opName string, xs []*xfer) error {
	if len(xs) == 0 {
		return nil
	}
	type stream struct {
		rank int
		send bool
	}
	last := make(map[stream]*xfer, 2*c.size)
	for _, x := range xs {
		k := stream{x.rank, x.send}
		x.prev = last[k]
		last[k] = x
	}
	// A lazy communicator: dial the lower ranks not connected yet, and
	// wait (below, like for any peer that has not started) for the higher
	// ones to dial.
	unconnected := 0
	connFd := -1
	if c.lazy {
		n, r, err := c.connectFor(xs)
		if err != nil {
			if c.closed.Load() {
				return fmt.Errorf("hvd: tcp: %s: %w", opName, backends.ErrClosed)
			}
			return c.fail(opName, &peer{rank: r, fd: -1}, err)
		}
		unconnected = n
		if unconnected > 0 {
			fd, unwatch, err := c.watch()
			if err != nil {
				return err
			}
			defer unwatch()
			connFd = fd
			unconnected = c.fillPeers(xs) // what arrived before the watch
		}
	}
	remaining := len(xs)
	lastMove := time.Now()
	watch := c.stall.Watch(lastMove)
	var pfds []unix.PollFd
	var pxs []*xfer
	for remaining > 0 {
		if unconnected > 0 {
			var b [8]byte
			if n, _ := unix.Read(connFd, b[:]); n > 0 {
				unconnected = c.fillPeers(xs)
			}
		}
		moved := false
		for _, x := range xs {
			if x.done || !x.ready() {
				continue
			}
			n, err := c.step(x)
			if err != nil {
				return c.fail(opName, x.p, err)
			}
			if n > 0 || x.done {
				moved = true
			}
			if x.done {
				remaining--
			}
		}
		if remaining == 0 {
			break
		}
		if moved {
			lastMove = time.Now()
			watch = c.stall.Watch(lastMove)
			continue
		}
		idle := time.Since(lastMove)
		if idle < c.spin {
			continue
		}
		if c.opTimeout > 0 && idle > c.opTimeout {
			if r := notConnected(xs); r >= 0 && c.waitingOn(xs) == nil {
				return c.fail(opName, &peer{rank: r, fd: -1}, fmt.Errorf("no progress for %v: it has not connected to this rank (connections past HVD_TCP_FULL_MESH_MAX members are made on first use): is it running this operation?", idle.Round(time.Second)))
			}
			return c.fail(opName, c.waitingOn(xs), fmt.Errorf("no progress for %v: the peer sends nothing although its connection is open (stopped, swapped out or stuck?), or the network to it is cut", idle.Round(time.Second)))
		}
		if p := c.waitingOn(xs); p != nil {
			watch(opName, p.rank)
		} else if r := notConnected(xs); r >= 0 {
			watch(opName, r)
		}
		// Block until a descriptor can move.
		pfds, pxs = pfds[:0], pxs[:0]
		pfds = append(pfds, unix.PollFd{Fd: int32(c.wakeFd), Events: unix.POLLIN})
		pxs = append(pxs, nil)
		if unconnected > 0 {
			pfds = append(pfds, unix.PollFd{Fd: int32(connFd), Events: unix.POLLIN})
			pxs = append(pxs, nil)
		}
		for _, x := range xs {
			if x.done || !x.ready() {
				continue
			}
			ev := int16(unix.POLLIN)
			if x.send {
				if x.hoff == hdrLen && x.feed != nil && x.feed.finished() <= x.doff && (x.p.sec == nil || x.p.sec.flushed()) {
					continue // waiting for local data, not for the socket
				}
				ev = unix.POLLOUT
			}
			pfds = append(pfds, unix.PollFd{Fd: int32(x.p.fd), Events: ev})
			pxs = append(pxs, x)
		}
		wait := 1000 // ms; re-check the stall timeout at least every second
		if e := c.stall.Every; e > 0 && e < time.Second {
			wait = max(int(e/time.Millisecond), 1)
		}
		if _, err := unix.Poll(pfds, wait); err != nil && !errors.Is(err, unix.EINTR) {
			return c.fail(opName, nil, fmt.Errorf("poll: %w", err))
		}
		if pfds[0].Revents != 0 && c.closed.Load() {
			return fmt.Errorf("hvd: tcp: %s: %w", opName, backends.ErrClosed)
		}
	}
	return nil
}

func (c *Comm) waitingOn(xs []*xfer) *peer {
	for _, x := range xs {
		if !x.done && x.ready() {
			return x.p
		}
	}
	return nil
}

// step makes as much progress on x as the socket allows without blocking.
// It returns the number of bytes moved.
func (c *Comm) step(x *xfer) (int, error) {
	if x.send {
		return c.stepSend(x)
	}
	return c.stepRecv(x)
}

func (c *Comm) stepSend(x *xfer) (int, error) {
	avail := len(x.data)
	if x.feed != nil {
		avail = x.feed.finished()
	}
	var iovArr [2][]byte
	iov := iovArr[:0]
	if x.hoff < hdrLen {
		iov = append(iov, x.hb[x.hoff:])
	}
	if x.doff < avail {
		iov = append(iov, x.data[x.doff:avail])
	}
	if x.p.sec != nil {
		return c.stepSendSecure(x, iov)
	}
	if len(iov) == 0 {
		return 0, nil
	}
	n, err := writev(x.p.fd, iov)
	if err != nil {
		if err == unix.EAGAIN {
			return 0, nil
		}
		return 0, fmt.Errorf("send failed: %w", err)
	}
	moved := n
	if x.hoff < hdrLen {
		k := min(n, hdrLen-x.hoff)
		x.hoff += k
		n -= k
	}
	x.doff += n
	if x.hoff == hdrLen && x.doff == len(x.data) {
		x.done = true
	}
	return moved, nil
}

func (c *Comm) stepRecv(x *xfer) (int, error) {
	var iovArr [2][]byte
	iov := iovArr[:0]
	if x.hoff < hdrLen {
		iov = append(iov, x.hb[x.hoff:])
	}
	var dst []byte
	switch {
	case x.anyLen && x.hoff < hdrLen:
		// length unknown until the header is in
	case x.red != nil:
		dst = x.red.window(x.doff)
	default:
		dst = x.data[x.doff:]
	}
	if len(dst) > 0 {
		iov = append(iov, dst)
	}
	if len(iov) == 0 { // zero-length message already complete
		x.done = true
		return 0, nil
	}
	var n int
	var err error
	if x.p.sec != nil {
		n, err = x.p.sec.recv(x.p.fd, iov)
	} else {
		n, err = readv(x.p.fd, iov)
	}
	if err != nil {
		if err == unix.EAGAIN {
			return 0, nil
		}
		return 0, fmt.Errorf("receive failed: %w", err)
	}
	if n == 0 {
		return 0, errEOF
	}
	moved := n
	if x.hoff < hdrLen {
		k := min(n, hdrLen-x.hoff)
		x.hoff += k
		n -= k
		if x.hoff == hdrLen {
			h, err := decodeHeader(x.hb[:])
			if err == nil && h.kind == kindBye {
				return 0, errPeerClosed
			}
			if err == nil && x.anyLen {
				if h.len > maxMsgBytes {
					return 0, fmt.Errorf("corrupt stream: control message of %d bytes (limit %d)", h.len, maxMsgBytes)
				}
				x.h.len = h.len
				x.data = make([]byte, h.len)
			}
			if err == nil {
				err = h.check(x.h)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	x.doff += n
	if x.red != nil {
		x.red.advance(x.doff)
	}
	if x.hoff == hdrLen && x.doff == int(x.h.len) {
		x.done = true
	}
	return moved, nil
}

// stepSendSecure is stepSend on an encrypted connection: the record layer
// takes plaintext (sealed at once) and the transfer is done only when its
// last record is in the kernel, as a clear send is done when its last byte
// is.
func (c *Comm) stepSendSecure(x *xfer, iov [][]byte) (int, error) {
	took, wrote, err := x.p.sec.send(x.p.fd, iov)
	if err != nil {
		return 0, fmt.Errorf("send failed: %w", err)
	}
	moved := took + wrote
	if x.hoff < hdrLen {
		k := min(took, hdrLen-x.hoff)
		x.hoff += k
		took -= k
	}
	x.doff += took
	if x.hoff == hdrLen && x.doff == len(x.data) && x.p.sec.flushed() {
		x.done = true
	}
	return moved, nil
}
