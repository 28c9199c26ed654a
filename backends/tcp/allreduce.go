package tcp

import (
	"fmt"
	"slices"

	"github.com/hvdorg/hvd/backends"
)

// defaultSmallBytes is where allreduce switches from the direct exchange to
// the ring. Direct: one round, every rank sends its whole buffer to every
// other and reduces n buffers locally — latency-optimal, (n-1)·S bytes sent.
// Ring: 2(n-1) pipelined steps, 2(n-1)/n·S bytes sent and (n-1)/n·S reduced
// per rank — bandwidth-optimal. Measured on the target VMs (hvdbench), the
// crossover at np=2..4 lies around 32–128 KiB.
const defaultSmallBytes = 64 << 10

func checkReduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("%w: dtype %v / op %v", backends.ErrInvalidArgument, dt, op)
	}
	if len(buf)%dt.Size() != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %v elements", backends.ErrInvalidArgument, len(buf), dt)
	}
	return nil
}

// Allreduce implements backends.Communicator.
func (c *Comm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	if err := checkReduce(buf, dt, op); err != nil {
		return err
	}
	seq, err := c.begin(true)
	if err != nil {
		return err
	}
	defer c.end()
	if c.size == 1 || len(buf) == 0 {
		return nil
	}
	count := len(buf) / dt.Size()
	if c.lazy && (len(buf) <= c.small || count < c.size) {
		return c.allreduceDoubling(seq, buf, dt, op)
	}
	if len(buf) <= c.small || count < c.size {
		return c.allreduceDirect(seq, buf, dt, op)
	}
	return c.allreduceRing(seq, buf, dt, op)
}

// allreduceDirect: one round of all-pairs exchange, then every rank reduces
// the n contributions in rank order (x0 op x1 op …), so every rank computes
// bit-identical results even for floating point.
func (c *Comm) allreduceDirect(seq uint64, buf []byte, dt backends.DType, op backends.ReduceOp) error {
	n, me, S := c.size, c.rank, len(buf)
	scratch := c.getScratch(n * S) // slot j holds rank j's contribution
	xs := make([]*xfer, 0, 2*(n-1))
	for d := 1; d < n; d++ {
		peer := (me + d) % n
		xs = append(xs, c.sendTo(peer, kindAllreduce, seq, 0, buf))
		xs = append(xs, c.recvFrom(peer, kindAllreduce, seq, 0, scratch[peer*S:(peer+1)*S]))
	}
	if err := c.run("allreduce", xs); err != nil {
		return err
	}
	acc := buf
	if me != 0 {
		acc = scratch[:S]
	}
	for j := 1; j < n; j++ {
		src := scratch[j*S : (j+1)*S]
		if j == me {
			src = buf
		}
		backends.Reduce(acc, src, dt, op)
	}
	if me != 0 {
		copy(buf, acc)
	}
	return nil
}

// allreduceDoubling is the small allreduce of a communicator that is not a
// full mesh: recursive doubling (⌈log2 n⌉+1 messages a member, to its
// partners only) instead of the direct exchange with every member.
func (c *Comm) allreduceDoubling(seq uint64, buf []byte, dt backends.DType, op backends.ReduceOp) error {
	out, err := c.doubling("allreduce", kindAllreduce, seq, slices.Clone(buf), func(lo, hi []byte) []byte {
		acc := slices.Clone(lo)
		backends.Reduce(acc, hi, dt, op)
		return acc
	})
	if err != nil {
		return err
	}
	copy(buf, out)
	return nil
}

// allreduceRing: reduce-scatter then allgather around the ring
// me-1 → me → me+1, all 2(n-1) steps posted at once. Each send is fed by
// the receive that produces its data, so a segment streams on to the next
// rank while it is still arriving (pipelining without fixed chunk sizes),
// and incoming data is reduced in a cache-sized ring as it lands.
func (c *Comm) allreduceRing(seq uint64, buf []byte, dt backends.DType, op backends.ReduceOp) error {
	n, me := c.size, c.rank
	off, length := blocks(len(buf)/dt.Size(), n, dt.Size())
	seg := func(k int) []byte { return buf[off[k] : off[k]+length[k]] }
	right, left := (me+1)%n, mod(me-1, n)
	xs := make([]*xfer, 0, 4*(n-1))
	var prev *xfer
	for s := 0; s < n-1; s++ {
		sx := c.sendTo(right, kindAllreduce, seq, uint32(s), seg(mod(me-s, n)))
		sx.feed = prev
		rx := c.recvReduce(left, kindAllreduce, seq, uint32(s), seg(mod(me-s-1, n)), dt, op)
		xs = append(xs, sx, rx)
		prev = rx
	}
	for s := 0; s < n-1; s++ {
		sx := c.sendTo(right, kindAllreduce, seq, uint32(n-1+s), seg(mod(me+1-s, n)))
		sx.feed = prev
		rx := c.recvFrom(left, kindAllreduce, seq, uint32(n-1+s), seg(mod(me-s, n)))
		xs = append(xs, sx, rx)
		prev = rx
	}
	return c.run("allreduce", xs)
}
