package shm

import (
	"fmt"
	"runtime"

	"github.com/hvdorg/hvd/backends"
)

// Broadcast copies root's buf into every member's buf.
//
// Up to SmallBytes it goes through root's slot: root copies buf in and
// returns, the others copy it out.
//
// Larger: cross-memory attach, with the copying shared between the root and
// the receivers instead of left to the receivers alone (issue 18: at two
// ranks the root's core used to wait while the receiver copied everything,
// and 1 MiB took 1.4× Open MPI's time). buf is cut into chunks; each
// receiver claims chunks from a counter in its control block and reads
// them from root's buffer (process_vm_readv), while the root claims chunks
// from the same counters and writes them straight into the receivers'
// buffers (process_vm_writev). Claiming instead of a fixed split keeps the
// work with whoever runs: a root or receiver that the scheduler parks
// (other load on a 2-core machine, more ranks than cores) costs only its
// share of the chunks in flight, never the op's half. A receiver returns
// once it read the chunks it claimed and the root's count of chunks
// written into its buffer covers the rest; the root returns once every
// receiver read what it claimed.
//
// Receivers always publish their buffer's address and open their claim
// counter; the root's slot header decides the mode, so ranks that disagree
// on SmallBytes still agree on the protocol.
func (c *Comm) Broadcast(buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: broadcast root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	const name = "broadcast"
	if err := c.begin(name); err != nil {
		return err
	}
	defer c.end()
	defer runtime.KeepAlive(buf) // peers read or write it until we return
	t := tag(kindBroadcast, 0, 0, root, len(buf))
	if c.rank == root {
		return c.broadcastRoot(buf, t)
	}
	// Open this op's claim counter before entering: the root claims only
	// after it saw us enter, and the op number in the counter's high half
	// turns its late attempts (after we moved on) into no-ops.
	claim := c.word(c.rank, ctlClaim)
	claim.Store(uint64(uint32(c.k)) << 32)
	pushed := c.word(c.rank, ctlPushed)
	pushed.Store(0)
	c.writeSlot(t, len(buf), modeCMA, addrOf(buf))
	c.enter()
	if err := c.await(name, c.oneWord(root, ctlSeq, c.k)); err != nil {
		return err
	}
	_, mode, addr, err := c.peerSlot(name, root, t)
	if err != nil {
		return err
	}
	if mode == modeSlot {
		if err := c.fetch(name, root, mode, addr, 0, buf); err != nil {
			return err
		}
		c.finish()
		return nil
	}
	size, n := bcastChunks(len(buf))
	mine := 0
	for {
		i, ok := c.claimChunk(c.rank, n)
		if !ok {
			break
		}
		lo, hi := i*size, min((i+1)*size, len(buf))
		if err := c.fetch(name, root, mode, addr, lo, buf[lo:hi]); err != nil {
			return err
		}
		mine++
	}
	c.finish() // done reading root's buffer
	// Every chunk is claimed: the root's are on their way.
	need := uint64(n - mine)
	return c.await(name, func() int {
		if pushed.Load() < need {
			return root
		}
		return -1
	})
}

// broadcastRoot is the root's side of Broadcast.
func (c *Comm) broadcastRoot(buf []byte, t opTag) error {
	const name = "broadcast"
	viaSlot := len(buf) <= c.small
	c.expose(t, buf, viaSlot)
	if viaSlot {
		c.finish()
		return nil
	}
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return err
	}
	addrs, err := c.peerAddrs(name, t)
	if err != nil {
		return err
	}
	size, n := bcastChunks(len(buf))
	active := make([]int, 0, c.size-1)
	for d := 1; d < c.size; d++ {
		active = append(active, (c.rank+d)%c.size)
	}
	// One chunk per receiver in turn, until every counter is exhausted.
	for len(active) > 0 {
		for j := 0; j < len(active); {
			r := active[j]
			i, ok := c.claimChunk(r, n)
			if !ok {
				active = append(active[:j], active[j+1:]...)
				continue
			}
			lo, hi := i*size, min((i+1)*size, len(buf))
			if err := c.writePeer(name, r, addrs[r]+uintptr(lo), buf[lo:hi]); err != nil {
				return err
			}
			c.publishAt(c.ctl(r)+ctlPushed, c.word(r, ctlPushed).Load()+1)
			j++
		}
	}
	c.finish()
	return c.waitReaders(name, everyone)
}

// claimChunk takes the next unclaimed of the n chunks of receiver r's
// current broadcast (op c.k): its index, or false once all are taken or r
// has moved on to another op.
func (c *Comm) claimChunk(r, n int) (int, bool) {
	w := c.word(r, ctlClaim)
	for {
		v := w.Load()
		if uint32(v>>32) != uint32(c.k) || int(uint32(v)) >= n {
			return 0, false
		}
		if w.CompareAndSwap(v, v+1) {
			return int(uint32(v)), true
		}
	}
}

// bcastChunks cuts a broadcast of n bytes into chunks: halves (one each
// for the root and a receiver when both run; a process that starts late
// finds its half taken) of whole pages, at least 64 KiB and at most 4 MiB
// (finer chunks cost system calls: a 64 KiB process_vm_readv runs at 3/4
// of a 1 MiB one's speed; at 256 KiB–4 MiB, quarters were 10–40 % slower
// than halves). It returns the chunk size and count.
func bcastChunks(n int) (size, count int) {
	size = min(max(n/2, 64<<10), 4<<20)
	size = (size + 4095) &^ 4095
	return size, (n + size - 1) / size
}
