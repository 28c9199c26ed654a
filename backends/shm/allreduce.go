package shm

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Allreduce reduces buf in place across all members.
//
// Up to SmallBytes: every rank copies its buffer into its slot and then
// reduces all slots, in rank order, into its own buffer (one copy in, no
// second synchronisation; every rank computes the same bits).
//
// Larger: a reduce-scatter then an allgather, both reading the peers'
// buffers directly (cross-memory attach). Rank r owns block r (elements
// split evenly, the first ranks one more). It reduces its block chunk by
// chunk: each peer's chunk is read into a cache-sized buffer and folded into
// r's own buffer; after each chunk r publishes its
// progress. Every rank then copies the other blocks from their owners'
// buffers as soon as the owners' progress covers them. Each block is reduced
// by one rank only (its own data first, then the peers in ring order), so
// every rank ends with the same bits.
func (c *Comm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	es := dt.Size()
	if es == 0 || !op.Valid() {
		return fmt.Errorf("%w: allreduce with %v/%v", backends.ErrInvalidArgument, dt, op)
	}
	if len(buf)%es != 0 {
		return fmt.Errorf("%w: allreduce of %d bytes is not a whole number of %v elements", backends.ErrInvalidArgument, len(buf), dt)
	}
	if err := c.begin("allreduce"); err != nil {
		return err
	}
	defer c.end()
	t := tag(kindAllreduce, dt, op, 0, len(buf))
	if c.size == 1 {
		c.enter()
		c.finish()
		return nil
	}
	if len(buf) <= c.small {
		return c.allreduceSlots(buf, t, dt, op)
	}
	return c.allreduceCMA(buf, t, dt, op)
}

func (c *Comm) allreduceSlots(buf []byte, t opTag, dt backends.DType, op backends.ReduceOp) error {
	c.expose(t, buf, true)
	if err := c.await("allreduce", c.allSeq(c.k)); err != nil {
		return err
	}
	if _, err := c.peerAddrs("allreduce", t); err != nil {
		return err
	}
	n := len(buf)
	backends.ReduceTo(buf, c.slotData(0, c.k, n), c.slotData(1, c.k, n), dt, op)
	for r := 2; r < c.size; r++ {
		backends.Reduce(buf, c.slotData(r, c.k, n), dt, op)
	}
	c.finish()
	return nil
}

// blocks splits n elements of es bytes into size blocks: byte offset and
// length of block r.
func blocks(n, es, size int) (off, ln []int) {
	off, ln = make([]int, size), make([]int, size)
	elems := n / es
	pos := 0
	for r := range size {
		e := elems / size
		if r < elems%size {
			e++
		}
		off[r], ln[r] = pos, e*es
		pos += e * es
	}
	return off, ln
}

func (c *Comm) allreduceCMA(buf []byte, t opTag, dt backends.DType, op backends.ReduceOp) error {
	const name = "allreduce"
	c.expose(t, buf, false)
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return err
	}
	addrs, err := c.peerAddrs(name, t)
	if err != nil {
		return err
	}
	off, ln := blocks(len(buf), dt.Size(), c.size)
	chunk := c.chunk - c.chunk%dt.Size()
	// Reduce-scatter: my block, chunk by chunk.
	mine, prog := off[c.rank], c.word(c.rank, ctlProg)
	for done := 0; done < ln[c.rank]; {
		n := min(chunk, ln[c.rank]-done)
		dst, tmp := buf[mine+done:mine+done+n], c.tmp[:n]
		for d := 1; d < c.size; d++ {
			r := (c.rank + d) % c.size
			if err := c.readPeer(name, r, tmp, addrs[r]+uintptr(mine+done)); err != nil {
				return err
			}
			backends.Reduce(dst, tmp, dt, op)
		}
		done += n
		prog.Store(uint64(done))
		c.ring()
	}
	// Allgather: the other blocks, straight into buf, as their owners
	// publish them.
	for d := 1; d < c.size; d++ {
		r := (c.rank + d) % c.size
		w := c.word(r, ctlProg)
		for got := 0; got < ln[r]; {
			want := uint64(min(got+chunk, ln[r]))
			if err := c.await(name, func() int {
				if w.Load() < want {
					return r
				}
				return -1
			}); err != nil {
				return err
			}
			avail := int(w.Load())
			if err := c.readPeer(name, r, buf[off[r]+got:off[r]+avail], addrs[r]+uintptr(off[r]+got)); err != nil {
				return err
			}
			got = avail
		}
	}
	c.finish()
	return c.waitReaders(name, everyone)
}
