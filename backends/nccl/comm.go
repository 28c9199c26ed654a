package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Config builds a Comm.
type Config struct {
	// Rank and Size: this member and the member count (set numbering).
	Rank, Size int
	// Device is the CUDA device ordinal the communicator is bound to (a
	// process drives one GPU per set; Horovod's rule: the local rank's).
	Device int
	// Set names the process set in errors ("process set 2").
	Set string
	// Exchange hands rank 0's ncclUniqueId to every member
	// (StoreExchange, MessengerExchange). Unused with Parent.
	Exchange IDExchange
	// Parent, when set and its NCCL has ncclCommSplit, builds the
	// communicator by splitting Parent with Color and Key: every member
	// of Parent must call New (or SplitNone) with the same Parent, in the
	// same order. Without ncclCommSplit, Exchange is used instead.
	Parent     *Comm
	Color, Key int
	// Host carries host-memory buffers (Comm's own Communicator methods):
	// the set's host data plane. Nil: host buffers are refused with
	// backends.ErrUnsupported.
	Host backends.Communicator
	// OpTimeout: an operation whose device work has not completed after
	// this long aborts the communicator and fails (0: never). The sdk
	// passes HOROVOD_GLOO_TIMEOUT_SECONDS / HVD_COLLECTIVE_TIMEOUT_SECONDS.
	OpTimeout time.Duration
	// Lib is the function table; nil loads NCCL (Load) from Paths.
	Lib Lib
	// Paths name the libraries to load when Lib is nil (HVD_NCCL_LIBRARY,
	// HVD_CUDART_LIBRARY, parsed by the sdk's knob table).
	Paths Paths
}

// Comm is one NCCL communicator of a process set, bound to one GPU, with
// its own CUDA stream for NCCL work. Calls follow backends.Communicator's
// rules (collective, one goroutine at a time, broken after a failure);
// Close may be called from any goroutine and aborts work in flight.
type Comm struct {
	lib    Lib
	cfg    Config
	rank   int
	size   int
	dev    int
	set    string
	host   backends.Communicator
	stream Stream // NCCL work runs here
	ready  Event  // recorded on the tensor's stream: NCCL work waits for it
	done   Event  // recorded on stream after the work: polled
	bar    Ptr    // 4 device bytes for Barrier

	mu       sync.Mutex // guards comm against a concurrent Close
	comm     CommHandle
	broken   error
	inflight bool // an operation was enqueued and has not completed
	closing  atomic.Bool
	closed   bool
}

var (
	_ backends.DeviceDataPlane = (*Comm)(nil)
)

// New builds this rank's communicator: loads NCCL (unless cfg.Lib), binds
// the calling thread to cfg.Device, and joins the set's NCCL communicator
// by splitting cfg.Parent or by ncclCommInitRank with rank 0's id handed
// over by cfg.Exchange. ctx bounds the id exchange.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: nccl: rank %d of %d", backends.ErrInvalidArgument, cfg.Rank, cfg.Size)
	}
	if cfg.Set == "" {
		cfg.Set = "the process set"
	}
	lib := cfg.Lib
	if lib == nil {
		var err error
		if lib, err = Load(cfg.Paths); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Set, err)
		}
	}
	c := &Comm{lib: lib, cfg: cfg, rank: cfg.Rank, size: cfg.Size, dev: cfg.Device, set: cfg.Set, host: cfg.Host}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var n int
	if e := lib.GetDeviceCount(&n); e != cudaSuccess || n == 0 {
		return nil, fmt.Errorf("%w: %s: no CUDA device visible (cudaGetDeviceCount: %d devices, %s); NCCL needs a GPU",
			ErrNotFound, c.set, n, c.cudaErr(e))
	}
	if cfg.Device < 0 || cfg.Device >= n {
		return nil, fmt.Errorf("%w: %s: CUDA device %d does not exist (%d visible)", backends.ErrInvalidArgument, c.set, cfg.Device, n)
	}
	if e := lib.SetDevice(cfg.Device); e != cudaSuccess {
		return nil, c.cudaFail("cudaSetDevice", e)
	}
	if err := c.resources(); err != nil {
		c.freeResources()
		return nil, err
	}
	var err error
	if cfg.Parent != nil && lib.HasSplit() {
		err = c.split(cfg.Parent, cfg.Color, cfg.Key)
	} else {
		err = c.initRank(ctx)
	}
	if err != nil {
		c.freeResources()
		return nil, err
	}
	return c, nil
}

func (c *Comm) resources() error {
	if e := c.lib.StreamCreate(&c.stream); e != cudaSuccess {
		return c.cudaFail("cudaStreamCreateWithFlags", e)
	}
	if e := c.lib.EventCreate(&c.ready); e != cudaSuccess {
		return c.cudaFail("cudaEventCreateWithFlags", e)
	}
	if e := c.lib.EventCreate(&c.done); e != cudaSuccess {
		return c.cudaFail("cudaEventCreateWithFlags", e)
	}
	if e := c.lib.Malloc(&c.bar, 4); e != cudaSuccess {
		return c.cudaFail("cudaMalloc", e)
	}
	return nil
}

func (c *Comm) freeResources() {
	if c.bar != 0 {
		c.lib.Free(c.bar)
		c.bar = 0
	}
	for _, e := range []*Event{&c.ready, &c.done} {
		if *e != 0 {
			c.lib.EventDestroy(*e)
			*e = 0
		}
	}
	if c.stream != 0 {
		c.lib.StreamDestroy(c.stream)
		c.stream = 0
	}
}

func (c *Comm) initRank(ctx context.Context) error {
	if c.cfg.Exchange == nil {
		return fmt.Errorf("%w: %s: nccl.Config needs Exchange (or a Parent with ncclCommSplit)", backends.ErrInvalidArgument, c.set)
	}
	var id UniqueID
	if c.rank == 0 {
		if r := c.lib.GetUniqueID(&id); r != Success {
			return c.ncclFail("ncclGetUniqueId", r, 0)
		}
	}
	got, err := c.cfg.Exchange(ctx, c.rank, id)
	if err != nil {
		return fmt.Errorf("%s: exchanging the NCCL unique id: %w", c.set, err)
	}
	var h CommHandle
	if r := c.lib.CommInitRank(&h, c.size, got, c.rank); r != Success {
		return c.ncclFail("ncclCommInitRank", r, h)
	}
	c.comm = h
	return nil
}

func (c *Comm) split(parent *Comm, color, key int) error {
	parent.mu.Lock()
	defer parent.mu.Unlock()
	if parent.comm == 0 {
		return fmt.Errorf("%w: %s: the parent NCCL communicator (%s) is closed", backends.ErrClosed, c.set, parent.set)
	}
	var h CommHandle
	if r := c.lib.CommSplit(parent.comm, color, key, &h); r != Success {
		return c.ncclFail("ncclCommSplit", r, parent.comm)
	}
	if h == 0 {
		return fmt.Errorf("%w: %s: ncclCommSplit returned no communicator for color %d", backends.ErrInvalidArgument, c.set, color)
	}
	c.comm = h
	return nil
}

// SplitNone is what a member of parent that belongs to none of the new
// communicators calls while the others call New with Parent (ncclCommSplit
// is collective over the parent). It is a no-op when the parent's NCCL
// has no ncclCommSplit (the others then use ncclCommInitRank).
func SplitNone(parent *Comm) error {
	if !parent.lib.HasSplit() {
		return nil
	}
	parent.mu.Lock()
	defer parent.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	parent.lib.SetDevice(parent.dev)
	var h CommHandle
	if r := parent.lib.CommSplit(parent.comm, SplitNoColor, 0, &h); r != Success {
		return parent.ncclFail("ncclCommSplit", r, parent.comm)
	}
	return nil
}

// Rank and Size number the set's members.
func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// Device is the GPU the communicator is bound to.
func (c *Comm) Device() int { return c.dev }

// Memory implements backends.DataPlane: GPU memory, and host memory when
// a host plane was given.
func (c *Comm) Memory() []backends.MemoryKind {
	if c.host != nil {
		return []backends.MemoryKind{backends.GPUMemory, backends.HostMemory}
	}
	return []backends.MemoryKind{backends.GPUMemory}
}

// On implements backends.DeviceDataPlane: the collectives on buffers in
// the memory of GPU d.Index (the communicator's), ordered after the work
// queued on d.Stream.
func (c *Comm) On(d backends.Device) (backends.Communicator, error) {
	if d.IsHost() {
		return c, nil
	}
	if d.Kind != backends.GPUMemory || d.Index != c.dev {
		return nil, fmt.Errorf("%w: %s: a tensor on %v cannot use this NCCL communicator, which is bound to gpu:%d (one GPU per process and set: set the device to the local rank's)",
			backends.ErrUnsupported, c.set, d, c.dev)
	}
	return &deviceComm{c: c, user: Stream(d.Stream)}, nil
}

// hostPlane returns the host plane or the error for a host buffer.
func (c *Comm) hostPlane(op string) (backends.Communicator, error) {
	if c.host == nil {
		return nil, fmt.Errorf("%w: %s: %s of host memory on an NCCL communicator without a host plane", backends.ErrUnsupported, c.set, op)
	}
	return c.host, nil
}

// The Communicator methods of Comm itself take host buffers (Device zero
// means the host): they go to the host plane.

func (c *Comm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	h, err := c.hostPlane("allreduce")
	if err != nil {
		return err
	}
	return h.Allreduce(buf, dt, op)
}

func (c *Comm) Allgatherv(send, recv []byte, counts []int) error {
	h, err := c.hostPlane("allgather")
	if err != nil {
		return err
	}
	return h.Allgatherv(send, recv, counts)
}

func (c *Comm) Broadcast(buf []byte, root int) error {
	h, err := c.hostPlane("broadcast")
	if err != nil {
		return err
	}
	return h.Broadcast(buf, root)
}

func (c *Comm) Alltoallv(send []byte, sc []int, recv []byte, rc []int) error {
	h, err := c.hostPlane("alltoall")
	if err != nil {
		return err
	}
	return h.Alltoallv(send, sc, recv, rc)
}

func (c *Comm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	h, err := c.hostPlane("reducescatter")
	if err != nil {
		return err
	}
	return h.ReduceScatter(send, recv, counts, dt, op)
}

// Barrier is an NCCL allreduce of one int32 on the device.
func (c *Comm) Barrier() error {
	return c.run("barrier", c.stream, func(l Lib, h CommHandle, s Stream) Result {
		return l.AllReduce(c.bar, c.bar, 1, NInt32, NSum, h, s)
	})
}

func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	h, err := c.hostPlane("send")
	if err != nil {
		return err
	}
	return h.Send(buf, dst, tag)
}

func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	h, err := c.hostPlane("recv")
	if err != nil {
		return err
	}
	return h.Recv(buf, src, tag)
}

// Close aborts NCCL work in flight (ncclCommAbort), else destroys the
// communicator, then closes the host plane. Safe from any goroutine and
// more than once; a call blocked in a wait returns backends.ErrClosed.
func (c *Comm) Close() error {
	c.closing.Store(true)
	var err error
	if c.mu.TryLock() {
		err = c.release(false)
		c.mu.Unlock()
	}
	// Else an operation holds mu: it sees closing and releases when its
	// NCCL call returns (an enqueue does not block; a wait polls closing).
	if c.host != nil {
		err = errors.Join(err, c.host.Close())
	}
	return err
}

// release frees the communicator (c.mu held): abort when work may be in
// flight or a peer failed, else destroy.
func (c *Comm) release(abort bool) error {
	if c.closed {
		return nil
	}
	c.closed = true
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.lib.SetDevice(c.dev)
	var r Result
	if c.comm != 0 {
		if abort || c.inflight || c.broken != nil {
			r = c.lib.CommAbort(c.comm)
		} else {
			r = c.lib.CommDestroy(c.comm)
		}
		c.comm = 0
	}
	c.freeResources()
	if r != Success {
		return fmt.Errorf("%s: releasing the NCCL communicator: %s", c.set, c.lib.GetErrorString(r))
	}
	return nil
}

// Version is the loaded NCCL's version code (ncclGetVersion).
func (c *Comm) Version() int {
	v, _ := c.lib.Version()
	return v
}
