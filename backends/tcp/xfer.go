package tcp

import "github.com/hvdorg/hvd/backends"

// Constructors for transfers; see progress.go.

// meshPeer is the connection to r of a full mesh; nil for a lazy
// communicator, whose run looks its connections up (connectFor).
func (c *Comm) meshPeer(r int) *peer {
	if c.lazy {
		return nil
	}
	return c.peers[r]
}

func (c *Comm) sendTo(peer int, kind msgKind, seq uint64, tag uint32, data []byte) *xfer {
	x := &xfer{rank: peer, p: c.meshPeer(peer), send: true, data: data, h: header{kind: kind, tag: tag, seq: seq, len: uint64(len(data))}}
	x.h.encode(&x.hb)
	return x
}

func (c *Comm) recvFrom(peer int, kind msgKind, seq uint64, tag uint32, data []byte) *xfer {
	return &xfer{rank: peer, p: c.meshPeer(peer), data: data, h: header{kind: kind, tag: tag, seq: seq, len: uint64(len(data))}}
}

// recvReduce receives len(dst) bytes from peer and reduces them into dst as
// they arrive.
func (c *Comm) recvReduce(peer int, kind msgKind, seq uint64, tag uint32, dst []byte, dt backends.DType, op backends.ReduceOp) *xfer {
	ring := c.getRing(0)
	es := dt.Size()
	ring = ring[:len(ring)-len(ring)%es]
	return &xfer{rank: peer, p: c.meshPeer(peer), h: header{kind: kind, tag: tag, seq: seq, len: uint64(len(dst))},
		red: &reducer{dst: dst, ring: ring, es: es, dt: dt, op: op}}
}

// blocks splits count elements of es bytes into n contiguous blocks, the
// first count%n blocks one element longer (Horovod's reducescatter rule),
// and returns byte offsets and lengths.
func blocks(count, n, es int) (off, length []int) {
	off, length = make([]int, n), make([]int, n)
	q, r := count/n, count%n
	o := 0
	for i := 0; i < n; i++ {
		k := q
		if i < r {
			k++
		}
		off[i], length[i] = o*es, k*es
		o += k
	}
	return off, length
}

func prefixSums(counts []int) []int {
	off := make([]int, len(counts))
	s := 0
	for i, c := range counts {
		off[i] = s
		s += c
	}
	return off
}

func mod(a, n int) int { return ((a % n) + n) % n }
