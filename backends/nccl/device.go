package nccl

import (
	"fmt"
	"runtime"

	"github.com/hvdorg/hvd/backends"
)

// deviceComm is a Comm's collectives on buffers in its GPU's memory,
// ordered after the work queued on the tensor's stream (Comm.On).
type deviceComm struct {
	c    *Comm
	user Stream
}

// Memory: the collectives of a device view take GPU memory only.
func (d *deviceComm) Memory() []backends.MemoryKind { return []backends.MemoryKind{backends.GPUMemory} }

func (d *deviceComm) Rank() int    { return d.c.rank }
func (d *deviceComm) Size() int    { return d.c.size }
func (d *deviceComm) Close() error { return d.c.Close() }

// ncclType maps a dtype and a reduction to NCCL's. NCCL has no 16-bit
// integers and no bool: bool reduces as uint8 (sum and max are OR, min
// and product AND, which on 0/1 values are max and min), int16/uint16
// reductions are refused (as Horovod's NCCL ops refuse them). Moving
// bytes (gather, broadcast, alltoall, send/recv) uses uint8 for all.
func (c *Comm) ncclType(dt backends.DType, op backends.ReduceOp) (DataType, RedOp, error) {
	nop, ok := map[backends.ReduceOp]RedOp{backends.Sum: NSum, backends.Product: NProd, backends.Min: NMin, backends.Max: NMax}[op]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s: reduction %v", backends.ErrInvalidArgument, c.set, op)
	}
	switch dt {
	case backends.Bool:
		if op == backends.Sum || op == backends.Max {
			return NUint8, NMax, nil
		}
		return NUint8, NMin, nil
	case backends.Uint8:
		return NUint8, nop, nil
	case backends.Int8:
		return NInt8, nop, nil
	case backends.Int32:
		return NInt32, nop, nil
	case backends.Int64:
		return NInt64, nop, nil
	case backends.Float16:
		return NFloat16, nop, nil
	case backends.Float32:
		return NFloat32, nop, nil
	case backends.Float64:
		return NFloat64, nop, nil
	case backends.BFloat16:
		if v, _ := c.lib.Version(); v < 21000 {
			return 0, 0, fmt.Errorf("%w: %s: bfloat16 reductions need NCCL 2.10 or newer (loaded: %s)", backends.ErrUnsupported, c.set, VersionString(v))
		}
		return NBFloat16, nop, nil
	}
	return 0, 0, fmt.Errorf("%w: %s: NCCL cannot reduce %v tensors (it has no 16-bit integers); use int32, or a CPU tensor", backends.ErrUnsupported, c.set, dt)
}

func (d *deviceComm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	c := d.c
	if len(buf)%max(dt.Size(), 1) != 0 || !dt.Valid() {
		return fmt.Errorf("%w: %s: allreduce of %d bytes of %v", backends.ErrInvalidArgument, c.set, len(buf), dt)
	}
	ndt, nop, err := c.ncclType(dt, op)
	if err != nil {
		return err
	}
	if len(buf) == 0 {
		return nil
	}
	p := addr(buf)
	defer runtime.KeepAlive(buf)
	return c.run("allreduce", d.user, func(l Lib, h CommHandle, s Stream) Result {
		return l.AllReduce(p, p, len(buf)/dt.Size(), ndt, nop, h, s)
	})
}

func (d *deviceComm) Broadcast(buf []byte, root int) error {
	c := d.c
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: %s: broadcast root %d of %d", backends.ErrInvalidArgument, c.set, root, c.size)
	}
	if len(buf) == 0 {
		return nil
	}
	p := addr(buf)
	defer runtime.KeepAlive(buf)
	return c.run("broadcast", d.user, func(l Lib, h CommHandle, s Stream) Result {
		return l.Broadcast(p, p, len(buf), NUint8, root, h, s)
	})
}

// Allgatherv: equal parts are one ncclAllGather; different ones (Horovod's
// allgather with a different dim 0 per rank) one ncclBroadcast per rank
// into its place, in one group, as Horovod's NCCL allgatherv does.
func (d *deviceComm) Allgatherv(send, recv []byte, counts []int) error {
	c := d.c
	total, err := backends.CheckCounts("allgather counts", counts, c.size)
	if err != nil {
		return err
	}
	if len(send) != counts[c.rank] || len(recv) != total {
		return fmt.Errorf("%w: %s: allgather of %d bytes into %d, counts %v", backends.ErrInvalidArgument, c.set, len(send), len(recv), counts)
	}
	if total == 0 {
		return nil
	}
	// Go memory (host buffers in tests and staging) must outlive the
	// asynchronous work, which holds only addresses.
	sp, rp := addr(send), addr(recv)
	defer runtime.KeepAlive(send)
	defer runtime.KeepAlive(recv)
	equal := true
	for _, n := range counts {
		equal = equal && n == counts[0]
	}
	return c.run("allgather", d.user, func(l Lib, h CommHandle, s Stream) Result {
		if equal {
			return l.AllGather(sp, rp, counts[0], NUint8, h, s)
		}
		return group(l, func() Result {
			off := 0
			for r, n := range counts {
				if n > 0 {
					if res := l.Broadcast(sp, rp+Ptr(off), n, NUint8, r, h, s); res != Success {
						return res
					}
				}
				off += n
			}
			return Success
		})
	})
}

// Alltoallv: one ncclSend and one ncclRecv per peer (self included), in one
// group.
func (d *deviceComm) Alltoallv(send []byte, sc []int, recv []byte, rc []int) error {
	c := d.c
	st, err := backends.CheckCounts("alltoall send counts", sc, c.size)
	if err != nil {
		return err
	}
	rt, err := backends.CheckCounts("alltoall receive counts", rc, c.size)
	if err != nil {
		return err
	}
	if len(send) != st || len(recv) != rt {
		return fmt.Errorf("%w: %s: alltoall of %d/%d bytes, counts %v/%v", backends.ErrInvalidArgument, c.set, len(send), len(recv), sc, rc)
	}
	if st == 0 && rt == 0 {
		return nil
	}
	// Go memory (host buffers in tests and staging) must outlive the
	// asynchronous work, which holds only addresses.
	sp, rp := addr(send), addr(recv)
	defer runtime.KeepAlive(send)
	defer runtime.KeepAlive(recv)
	return c.run("alltoall", d.user, func(l Lib, h CommHandle, s Stream) Result {
		return group(l, func() Result {
			so, ro := 0, 0
			for p := 0; p < c.size; p++ {
				if sc[p] > 0 {
					if res := l.Send(sp+Ptr(so), sc[p], NUint8, p, h, s); res != Success {
						return res
					}
				}
				if rc[p] > 0 {
					if res := l.Recv(rp+Ptr(ro), rc[p], NUint8, p, h, s); res != Success {
						return res
					}
				}
				so += sc[p]
				ro += rc[p]
			}
			return Success
		})
	})
}

// ReduceScatter: equal blocks are one ncclReduceScatter; Horovod's uneven
// row split one ncclReduce per block to its rank, in one group.
func (d *deviceComm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	c := d.c
	total, err := backends.CheckCounts("reducescatter counts", counts, c.size)
	if err != nil {
		return err
	}
	es := dt.Size()
	if !dt.Valid() || len(send) != total*es || len(recv) != counts[c.rank]*es {
		return fmt.Errorf("%w: %s: reducescatter of %d bytes into %d, counts %v of %v", backends.ErrInvalidArgument, c.set, len(send), len(recv), counts, dt)
	}
	ndt, nop, err := c.ncclType(dt, op)
	if err != nil {
		return err
	}
	if total == 0 {
		return nil
	}
	// Go memory (host buffers in tests and staging) must outlive the
	// asynchronous work, which holds only addresses.
	sp, rp := addr(send), addr(recv)
	defer runtime.KeepAlive(send)
	defer runtime.KeepAlive(recv)
	equal := true
	for _, n := range counts {
		equal = equal && n == counts[0]
	}
	return c.run("reducescatter", d.user, func(l Lib, h CommHandle, s Stream) Result {
		if equal {
			return l.ReduceScatter(sp, rp, counts[0], ndt, nop, h, s)
		}
		return group(l, func() Result {
			off := 0
			for r, n := range counts {
				if n > 0 {
					if res := l.Reduce(sp+Ptr(off*es), rp, n, ndt, nop, r, h, s); res != Success {
						return res
					}
				}
				off += n
			}
			return Success
		})
	})
}

func (d *deviceComm) Barrier() error { return d.c.Barrier() }

// Send and Recv on device memory are refused: NCCL has no tags and
// cannot check lengths, and one NCCL stream per communicator cannot let
// distinct peers progress independently, which backends.Communicator
// promises (a receive waiting for its message would block a send queued
// behind it). hvd's point-to-point ops on GPU tensors go through host
// memory (the set's point-to-point mesh is a host transport).
func (d *deviceComm) Send(buf []byte, dst int, tag uint32) error { return d.noP2P("send") }
func (d *deviceComm) Recv(buf []byte, src int, tag uint32) error { return d.noP2P("recv") }

func (d *deviceComm) noP2P(op string) error {
	return fmt.Errorf("%w: %s: %s of GPU memory on the NCCL data plane (point-to-point goes through host memory)", backends.ErrUnsupported, d.c.set, op)
}

// group runs calls between ncclGroupStart and ncclGroupEnd; GroupEnd runs
// even when a call failed (NCCL's rule: groups must be closed).
func group(l Lib, calls func() Result) Result {
	if r := l.GroupStart(); r != Success {
		return r
	}
	r := calls()
	if e := l.GroupEnd(); r == Success {
		r = e
	}
	return r
}
