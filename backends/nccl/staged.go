package nccl

import (
	"fmt"
	"runtime"

	"github.com/hvdorg/hvd/backends"
)

// copyWait copies n bytes between host and device on the communicator's
// stream and waits for the copy (through the same wait as NCCL work, so a
// close or a CUDA error ends it too).
func (c *Comm) copyWait(dst, src Ptr, n int, kind CopyKind) error {
	if n == 0 {
		return nil
	}
	return c.run("copy", c.stream, func(l Lib, _ CommHandle, s Stream) Result {
		if e := l.MemcpyAsync(dst, src, n, kind, s); e != cudaSuccess {
			return UnhandledCudaError
		}
		return Success
	})
}

// hostView runs a Comm's device collectives on host buffers: every call
// copies its inputs into device scratch memory, runs on the GPU and copies
// the results back. It is how the conformance suite (which fills and
// checks host memory) reaches real NCCL (HostView, scripts/gpu-check.sh);
// it is not a data path for tensors.
type hostView struct {
	c   *Comm
	dev backends.Communicator
}

// HostView returns c's device collectives on host buffers (copies both
// ways around every call).
func HostView(c *Comm) backends.Communicator {
	d, _ := c.On(backends.Device{Kind: backends.GPUMemory, Index: c.dev})
	return &hostView{c: c, dev: d}
}

func (h *hostView) Rank() int    { return h.c.rank }
func (h *hostView) Size() int    { return h.c.size }
func (h *hostView) Close() error { return h.c.Close() }
func (h *hostView) Barrier() error {
	return h.dev.Barrier()
}

// dev allocates device copies of bufs (inputs copied in) and returns them
// as byte spans of device addresses, and a function copying the outputs
// back and freeing everything.
func (h *hostView) stage(in [][]byte, out [][]byte) ([][]byte, func(err error) error, error) {
	var ptrs []Ptr
	free := func() {
		for _, p := range ptrs {
			h.c.lib.Free(p)
		}
	}
	spans := make([][]byte, 0, len(in)+len(out))
	for _, b := range append(append([][]byte{}, in...), out...) {
		var p Ptr
		if e := h.c.lib.Malloc(&p, max(len(b), 1)); e != cudaSuccess {
			free()
			return nil, nil, h.c.cudaFail("cudaMalloc", e)
		}
		ptrs = append(ptrs, p)
		spans = append(spans, deviceSpan(p, len(b)))
	}
	for i, b := range in {
		if err := h.c.copyWait(ptrs[i], addr(b), len(b), HostToDevice); err != nil {
			free()
			return nil, nil, err
		}
		runtime.KeepAlive(b)
	}
	finish := func(err error) error {
		defer free()
		if err != nil {
			return err
		}
		for j, b := range out {
			if err := h.c.copyWait(addr(b), ptrs[len(in)+j], len(b), DeviceToHost); err != nil {
				return err
			}
			runtime.KeepAlive(b)
		}
		return nil
	}
	return spans, finish, nil
}

func (h *hostView) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	s, finish, err := h.stage([][]byte{buf}, nil)
	if err != nil {
		return err
	}
	err = h.dev.Allreduce(s[0], dt, op)
	if err == nil {
		err = h.c.copyWait(addr(buf), addr(s[0]), len(buf), DeviceToHost)
	}
	return finish(err)
}

func (h *hostView) Broadcast(buf []byte, root int) error {
	s, finish, err := h.stage([][]byte{buf}, nil)
	if err != nil {
		return err
	}
	err = h.dev.Broadcast(s[0], root)
	if err == nil {
		err = h.c.copyWait(addr(buf), addr(s[0]), len(buf), DeviceToHost)
	}
	return finish(err)
}

func (h *hostView) Allgatherv(send, recv []byte, counts []int) error {
	s, finish, err := h.stage([][]byte{send}, [][]byte{recv})
	if err != nil {
		return err
	}
	return finish(h.dev.Allgatherv(s[0], s[1], counts))
}

func (h *hostView) Alltoallv(send []byte, sc []int, recv []byte, rc []int) error {
	s, finish, err := h.stage([][]byte{send}, [][]byte{recv})
	if err != nil {
		return err
	}
	return finish(h.dev.Alltoallv(s[0], sc, s[1], rc))
}

func (h *hostView) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	s, finish, err := h.stage([][]byte{send}, [][]byte{recv})
	if err != nil {
		return err
	}
	return finish(h.dev.ReduceScatter(s[0], s[1], counts, dt, op))
}

func (h *hostView) Send(buf []byte, dst int, tag uint32) error { return h.dev.Send(buf, dst, tag) }
func (h *hostView) Recv(buf []byte, src int, tag uint32) error { return h.dev.Recv(buf, src, tag) }

// Staged is a host communicator that takes device buffers: the inputs are
// copied to host memory on c's stream, host runs the collective, the
// results are copied back. It is the cross-host leg of the hierarchical
// allreduce over GPUs (Horovod's: NCCL reduce-scatter inside the host,
// the host transport between hosts, NCCL allgather inside the host): give
// it to backends/hier as the "leaders"/"cross-l<i>" communicators, with
// Comm.On views as the local ones.
type Staged struct {
	c    *Comm
	host backends.Communicator
}

// NewStaged stages host's collectives through c's GPU.
func NewStaged(host backends.Communicator, c *Comm) *Staged { return &Staged{c: c, host: host} }

func (s *Staged) Rank() int      { return s.host.Rank() }
func (s *Staged) Size() int      { return s.host.Size() }
func (s *Staged) Close() error   { return s.host.Close() }
func (s *Staged) Barrier() error { return s.host.Barrier() }

// toHost copies device spans into new host buffers.
func (s *Staged) toHost(spans ...[]byte) ([][]byte, error) {
	out := make([][]byte, len(spans))
	for i, d := range spans {
		out[i] = make([]byte, len(d))
		if err := s.c.copyWait(addr(out[i]), addr(d), len(d), DeviceToHost); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Staged) back(dst []byte, src []byte) error {
	err := s.c.copyWait(addr(dst), addr(src), len(src), HostToDevice)
	runtime.KeepAlive(src)
	return err
}

func (s *Staged) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	h, err := s.toHost(buf)
	if err != nil {
		return err
	}
	if err := s.host.Allreduce(h[0], dt, op); err != nil {
		return err
	}
	return s.back(buf, h[0])
}

func (s *Staged) Broadcast(buf []byte, root int) error {
	h, err := s.toHost(buf)
	if err != nil {
		return err
	}
	if err := s.host.Broadcast(h[0], root); err != nil {
		return err
	}
	return s.back(buf, h[0])
}

func (s *Staged) Allgatherv(send, recv []byte, counts []int) error {
	h, err := s.toHost(send)
	if err != nil {
		return err
	}
	r := make([]byte, len(recv))
	if err := s.host.Allgatherv(h[0], r, counts); err != nil {
		return err
	}
	return s.back(recv, r)
}

func (s *Staged) Alltoallv(send []byte, sc []int, recv []byte, rc []int) error {
	h, err := s.toHost(send)
	if err != nil {
		return err
	}
	r := make([]byte, len(recv))
	if err := s.host.Alltoallv(h[0], sc, r, rc); err != nil {
		return err
	}
	return s.back(recv, r)
}

func (s *Staged) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	h, err := s.toHost(send)
	if err != nil {
		return err
	}
	r := make([]byte, len(recv))
	if err := s.host.ReduceScatter(h[0], r, counts, dt, op); err != nil {
		return err
	}
	return s.back(recv, r)
}

func (s *Staged) Send(buf []byte, dst int, tag uint32) error {
	return fmt.Errorf("%w: staged send of GPU memory", backends.ErrUnsupported)
}

func (s *Staged) Recv(buf []byte, src int, tag uint32) error {
	return fmt.Errorf("%w: staged recv of GPU memory", backends.ErrUnsupported)
}
