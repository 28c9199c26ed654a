package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hvdorg/hvd/backends"
)

// A benchCase owns preallocated buffers for one op and size.
type benchCase struct {
	bytes, count int64
	run          func() error
	reset        func()       // zero the buffers before timing (values stay bounded)
	check        func() int64 // fill inputs, run once, count wrong elements
}

func get(b []byte, dt backends.DType, i int) float64 {
	switch dt {
	case backends.Uint8, backends.Bool:
		return float64(b[i])
	case backends.Int8:
		return float64(int8(b[i]))
	case backends.Uint16:
		return float64(binary.LittleEndian.Uint16(b[2*i:]))
	case backends.Int16:
		return float64(int16(binary.LittleEndian.Uint16(b[2*i:])))
	case backends.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case backends.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case backends.Float16:
		return float64(backends.F16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case backends.BFloat16:
		return float64(backends.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case backends.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	default:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
}

func set(b []byte, dt backends.DType, i int, v float64) {
	switch dt {
	case backends.Uint8, backends.Int8, backends.Bool:
		b[i] = byte(int64(v))
	case backends.Uint16, backends.Int16:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int64(v)))
	case backends.Int32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int64(v)))
	case backends.Int64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	case backends.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], backends.F32ToF16(float32(v)))
	case backends.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], backends.F32ToBF16(float32(v)))
	case backends.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
}

func touch(b []byte) []byte {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	return b
}

func zero(bs ...[]byte) {
	for _, b := range bs {
		clear(b)
	}
}

func newCase(b *bench, size int64) (*benchCase, error) {
	dt := b.o.dtype
	es := int64(dt.Size())
	n, me := b.n, b.me
	if dt == backends.Bool && b.o.op != "broadcast" && b.o.op != "allgather" && b.o.op != "alltoall" && b.o.op != "barrier" {
		return nil, fmt.Errorf("%w: %s does not check bool results; use a numeric dtype", errUsage, b.o.op)
	}
	c := b.c
	switch b.o.op {
	case "barrier":
		return &benchCase{run: c.Barrier, reset: func() {}, check: func() int64 { return 0 }}, nil

	case "allreduce":
		cnt := max(size/es, 1)
		buf := touch(backends.Alloc(int(cnt * es)))
		return &benchCase{bytes: cnt * es, count: cnt,
			run:   func() error { return c.Allreduce(buf, dt, backends.Sum) },
			reset: func() { zero(buf) },
			check: func() int64 {
				for i := 0; i < int(cnt); i++ {
					set(buf, dt, i, float64(me+1+i%5))
				}
				if err := c.Allreduce(buf, dt, backends.Sum); err != nil {
					return cnt
				}
				var wrong int64
				for i := 0; i < int(cnt); i++ {
					if get(buf, dt, i) != float64(n*(n+1)/2+n*(i%5)) {
						wrong++
					}
				}
				return wrong
			}}, nil

	case "sendrecv":
		// nccl-tests' sendrecv: every rank sends to its right neighbour
		// while it receives from its left one (a ring shift), the pattern of
		// activations moving between pipeline stages.
		if n < 2 {
			return nil, fmt.Errorf("%w: sendrecv needs at least 2 ranks", errUsage)
		}
		cnt := max(size/es, 1)
		send, recv := touch(backends.Alloc(int(cnt*es))), touch(backends.Alloc(int(cnt*es)))
		right, left := (me+1)%n, (me+n-1)%n
		errc := make(chan error, 1)
		shift := func() error {
			if sr, ok := c.(backends.SendRecver); ok { // MPI_Sendrecv, one thread
				return sr.SendRecv(send, right, 1, recv, left, 1)
			}
			go func() { errc <- c.Send(send, right, 1) }()
			err := c.Recv(recv, left, 1)
			if e := <-errc; err == nil {
				err = e
			}
			return err
		}
		return &benchCase{bytes: cnt * es, count: cnt, run: shift, reset: func() {},
			check: func() int64 {
				for i := 0; i < int(cnt); i++ {
					set(send, dt, i, float64(me+1+i%5))
				}
				zero(recv)
				if err := shift(); err != nil {
					return cnt
				}
				var wrong int64
				for i := 0; i < int(cnt); i++ {
					if get(recv, dt, i) != float64(left+1+i%5) {
						wrong++
					}
				}
				return wrong
			}}, nil

	case "broadcast":
		cnt := max(size/es, 1)
		buf := touch(backends.Alloc(int(cnt * es)))
		return &benchCase{bytes: cnt * es, count: cnt,
			run:   func() error { return c.Broadcast(buf, 0) },
			reset: func() {},
			check: func() int64 {
				for i := 0; i < int(cnt); i++ {
					v := 0.0
					if me == 0 {
						v = float64(1 + i%5)
					}
					set(buf, dt, i, v)
				}
				if err := c.Broadcast(buf, 0); err != nil {
					return cnt
				}
				var wrong int64
				for i := 0; i < int(cnt); i++ {
					if get(buf, dt, i) != float64(1+i%5) {
						wrong++
					}
				}
				return wrong
			}}, nil

	case "allgather":
		per := max(size/es/int64(n), 1)
		send := touch(backends.Alloc(int(per * es)))
		recv := touch(backends.Alloc(int(per * es * int64(n))))
		counts := make([]int, n)
		for i := range counts {
			counts[i] = int(per * es)
		}
		return &benchCase{bytes: per * es * int64(n), count: per * int64(n),
			run:   func() error { return c.Allgatherv(send, recv, counts) },
			reset: func() {},
			check: func() int64 {
				for i := 0; i < int(per); i++ {
					set(send, dt, i, float64(me+i%5))
				}
				zero(recv)
				if err := c.Allgatherv(send, recv, counts); err != nil {
					return per * int64(n)
				}
				var wrong int64
				for r := 0; r < n; r++ {
					for i := 0; i < int(per); i++ {
						if get(recv, dt, r*int(per)+i) != float64(r+i%5) {
							wrong++
						}
					}
				}
				return wrong
			}}, nil

	case "alltoall":
		per := max(size/es/int64(n), 1) // elements per block
		send := touch(backends.Alloc(int(per * es * int64(n))))
		recv := touch(backends.Alloc(int(per * es * int64(n))))
		counts := make([]int, n)
		for i := range counts {
			counts[i] = int(per * es)
		}
		return &benchCase{bytes: per * es * int64(n), count: per * int64(n),
			run:   func() error { return c.Alltoallv(send, counts, recv, counts) },
			reset: func() {},
			check: func() int64 {
				for j := 0; j < n; j++ {
					for i := 0; i < int(per); i++ {
						set(send, dt, j*int(per)+i, float64(me*10+j+i%3))
					}
				}
				zero(recv)
				if err := c.Alltoallv(send, counts, recv, counts); err != nil {
					return per * int64(n)
				}
				var wrong int64
				for r := 0; r < n; r++ {
					for i := 0; i < int(per); i++ {
						if get(recv, dt, r*int(per)+i) != float64(r*10+me+i%3) {
							wrong++
						}
					}
				}
				return wrong
			}}, nil

	case "reducescatter":
		per := max(size/es/int64(n), 1)
		send := touch(backends.Alloc(int(per * es * int64(n))))
		recv := touch(backends.Alloc(int(per * es)))
		counts := make([]int, n)
		for i := range counts {
			counts[i] = int(per)
		}
		return &benchCase{bytes: per * es * int64(n), count: per * int64(n),
			run:   func() error { return c.ReduceScatter(send, recv, counts, dt, backends.Sum) },
			reset: func() { zero(send) },
			check: func() int64 {
				total := int(per) * n
				for i := 0; i < total; i++ {
					set(send, dt, i, float64(me+1+i%5))
				}
				if err := c.ReduceScatter(send, recv, counts, dt, backends.Sum); err != nil {
					return per
				}
				var wrong int64
				off := me * int(per)
				for i := 0; i < int(per); i++ {
					if get(recv, dt, i) != float64(n*(n+1)/2+n*((off+i)%5)) {
						wrong++
					}
				}
				return wrong
			}}, nil
	}
	return nil, fmt.Errorf("%w: unknown op %s", errUsage, b.o.op)
}
