//go:build mpi && cgo

package mpi

/*
#cgo pkg-config: ompi-c
#include "hvdmpi.h"
*/
import "C"

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// Built reports whether this binary was built with MPI (-tags mpi).
func Built() bool { return true }

func init() {
	backends.Register(backends.Backend{
		// Before hier (10): a set that spans hosts goes to MPI when this is
		// the MPI build running under mpirun (MPI reaches the fast
		// interconnect); on one host shm stays the choice unless
		// HVD_BACKEND=mpi (see Serves). Never a flat sub-communicator (hier's
		// meshes, the host plane a pair borrows).
		// Named by HVD_BACKEND (SetInfo.Chosen) it serves every non-flat
		// set, on one host too; under auto only sets that span hosts.
		Name: "mpi", Label: "MPI", Preference: 5, Choosable: true, OwnControl: false,
		Serves: func(s backends.SetInfo) bool {
			return (s.MPILaunch || initOK.Load()) && s.Size >= 1 && !s.Flat && (s.Hosts > 1 || s.Chosen)
		},
		New: factory,
		Doc: "MPI (the MPI build under mpirun): collectives on an MPI communicator per set, negotiation over the set's host transport",
	})
}

// factory builds the communicator for the registry (Backend.New): the set's MPI communicator (members
// exchange their MPI_COMM_WORLD ranks through the store); the SDK pairs it
// with a host control plane.
func factory(ctx context.Context, b backends.Build) (backends.Planes, error) {
	c, err := New(ctx, Config{Store: b.Store, Prefix: b.Name + "/mpi", Rank: b.Rank, Size: b.Size})
	if err != nil {
		return backends.Planes{}, err
	}
	return backends.Planes{Data: c}, nil
}

var (
	initOnce sync.Once
	initErr  error
	initOK   atomic.Bool
	threads  int
	weInit   bool
	tagUB    int
)

// Init initializes MPI once per process (MPI_Init_thread asking for
// MPI_THREAD_MULTIPLE, finalized at process exit), or adopts the process's
// MPI when something else initialized it (mpi4py). It fails with
// ErrUnsupported when MPI gives less than MPI_THREAD_MULTIPLE.
func Init() error {
	if finalized.Load() {
		return errFinalized
	}
	initOnce.Do(func() {
		var provided, we C.int
		if rc := C.hvd_mpi_init(&provided, &we); rc != 0 {
			initErr = fmt.Errorf("%w: MPI_Init_thread: %s", backends.ErrUnsupported, errString(rc))
			return
		}
		threads, weInit = int(provided), we != 0
		tagUB = int(C.hvd_mpi_tag_ub())
		if provided < C.hvd_mpi_thread_multiple() {
			initErr = fmt.Errorf("%w: MPI provides thread level %d, but hvd's MPI data plane needs MPI_THREAD_MULTIPLE "+
				"(each process set's engine calls MPI from its own thread); with mpi4py keep mpi4py.rc.thread_level = "+
				"'multiple' (its default), or use an MPI built with thread support", backends.ErrUnsupported, provided)
			return
		}
		initOK.Store(true)
	})
	return initErr
}

// Finalize calls MPI_Finalize when this package initialized MPI and it is
// not finalized yet; communicators must be closed first. A C program or
// Python (libhvd.so) exits through exit(3), which runs it on its own; a Go
// program leaves through os.Exit, which does not, and mpirun then reports
// the rank as "exiting improperly": call it before exiting.
func Finalize() {
	if weInit && !finalized.Swap(true) {
		C.hvd_mpi_finalize()
	}
}

// finalized: Finalize ended MPI; later calls fail instead of calling into
// a finalized MPI.
var finalized atomic.Bool

// errFinalized is what every call returns after Finalize.
var errFinalized = fmt.Errorf("%w: MPI was finalized in this process (hvd finalizes it after a bootstrap on one host when nothing else needs MPI; a Go program that uses HVD_BACKEND=mpi or spans hosts calls sdk.FinalizeMPI only at exit)", backends.ErrUnsupported)

// ThreadsSupported reports whether MPI was initialized with
// MPI_THREAD_MULTIPLE (Horovod's mpi_threads_supported).
func ThreadsSupported() bool {
	return (Init() == nil || finalized.Load()) && threads >= int(C.hvd_mpi_thread_multiple())
}

// WorldRank returns this process's rank and size in MPI_COMM_WORLD.
func WorldRank() (rank, size int, err error) {
	if err := Init(); err != nil {
		return 0, 0, err
	}
	var r, s C.int
	if rc := C.hvd_mpi_world_rank(&r, &s); rc != 0 {
		return 0, 0, mpiErr("MPI_Comm_rank", rc)
	}
	return int(r), int(s), nil
}

// BcastWorld broadcasts buf from MPI_COMM_WORLD rank root to every process
// (the SDK's MPI bootstrap sends rank 0's store address with it).
func BcastWorld(buf []byte, root int) error {
	if err := Init(); err != nil {
		return err
	}
	var world C.MPI_Comm
	if rc := C.hvd_mpi_comm_world(&world); rc != 0 {
		return mpiErr("MPI_Comm_dup", rc)
	}
	defer C.hvd_mpi_comm_free(&world)
	if len(buf) == 0 {
		return nil
	}
	if rc := C.hvd_mpi_bcast(unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(root), world); rc != 0 {
		return mpiErr("MPI_Bcast", rc)
	}
	return nil
}

// AllgatherWorld gathers every process's send (the same length on all) in
// MPI_COMM_WORLD rank order.
func AllgatherWorld(send []byte) ([]byte, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	_, n, err := WorldRank()
	if err != nil {
		return nil, err
	}
	recv := make([]byte, n*len(send))
	if len(send) == 0 {
		return recv, nil
	}
	if rc := C.hvd_mpi_allgather_world(unsafe.Pointer(&send[0]), C.int(len(send)), unsafe.Pointer(&recv[0])); rc != 0 {
		return nil, mpiErr("MPI_Allgather", rc)
	}
	return recv, nil
}

func errString(rc C.int) string {
	var buf [512]C.char
	C.hvd_mpi_error_string(rc, &buf[0], C.int(len(buf)))
	return C.GoString(&buf[0])
}

func mpiErr(call string, rc C.int) error {
	return fmt.Errorf("%w: mpi: %s: %s", backends.ErrPeerFailure, call, errString(rc))
}

// Config configures a set's MPI communicator.
type Config struct {
	// Store exchanges the members' MPI_COMM_WORLD ranks (when WorldRanks is
	// nil), under Prefix.
	Store  backends.Store
	Prefix string
	// Rank is this process's index in the set, Size the member count.
	Rank, Size int
	// WorldRanks, when set, are the members' MPI_COMM_WORLD ranks in set
	// order (tests); else they are exchanged through Store.
	WorldRanks []int
}

// Comm is one process set's MPI communicator: a backends.DataPlane.
type Comm struct {
	rank, size int
	comm       C.MPI_Comm
	mu         sync.Mutex // held by collectives; Close frees the communicator under it
	broken     atomic.Pointer[error]
	closed     atomic.Bool
	freed      bool
}

var (
	_ backends.DataPlane  = (*Comm)(nil)
	_ backends.SendRecver = (*Comm)(nil)
)

// New builds the set's communicator with MPI_Comm_create_group over the
// members' MPI_COMM_WORLD ranks: only the members take part (collective
// over them), so sets are built concurrently; the group tag is derived from
// Prefix.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: mpi: rank %d of %d", backends.ErrInvalidArgument, cfg.Rank, cfg.Size)
	}
	me, wsize, err := WorldRank()
	if err != nil {
		return nil, err
	}
	world := cfg.WorldRanks
	if world == nil {
		if world, err = exchange(ctx, cfg, me); err != nil {
			return nil, err
		}
	}
	if len(world) != cfg.Size || world[cfg.Rank] != me {
		return nil, fmt.Errorf("%w: mpi: member %d of %d is MPI_COMM_WORLD rank %d, but the set's world ranks are %v",
			backends.ErrInvalidArgument, cfg.Rank, cfg.Size, me, world)
	}
	cranks := make([]C.int, len(world))
	for i, r := range world {
		if r < 0 || r >= wsize {
			return nil, fmt.Errorf("%w: mpi: MPI_COMM_WORLD rank %d out of range (size %d)", backends.ErrInvalidArgument, r, wsize)
		}
		cranks[i] = C.int(r)
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Prefix))
	tag := int(h.Sum32()) % (min(tagUB, math.MaxInt32) + 1)
	c := &Comm{rank: cfg.Rank, size: cfg.Size}
	if rc := C.hvd_mpi_comm_create(&cranks[0], C.int(len(cranks)), C.int(tag), &c.comm); rc != 0 {
		return nil, mpiErr("MPI_Comm_create_group", rc)
	}
	return c, nil
}

// exchange publishes this member's MPI_COMM_WORLD rank and reads the
// others' through the store.
func exchange(ctx context.Context, cfg Config, me int) ([]int, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: mpi: no store to exchange MPI_COMM_WORLD ranks", backends.ErrInvalidArgument)
	}
	key := func(r int) string { return cfg.Prefix + "/mpi/" + strconv.Itoa(r) }
	if err := cfg.Store.Set(ctx, key(cfg.Rank), []byte(strconv.Itoa(me))); err != nil {
		return nil, err
	}
	out := make([]int, cfg.Size)
	for r := range out {
		v, err := cfg.Store.Get(ctx, key(r))
		if err != nil {
			return nil, fmt.Errorf("mpi: member %d's MPI_COMM_WORLD rank: %w", r, err)
		}
		if out[r], err = strconv.Atoi(string(v)); err != nil {
			return nil, fmt.Errorf("%w: mpi: member %d's MPI_COMM_WORLD rank %q", backends.ErrPeerFailure, r, v)
		}
	}
	return out, nil
}

func (c *Comm) Rank() int                     { return c.rank }
func (c *Comm) Size() int                     { return c.size }
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

// enter starts a call: it fails once the communicator is closed or broken.
func (c *Comm) enter() error {
	if c.closed.Load() {
		return backends.ErrClosed
	}
	if e := c.broken.Load(); e != nil {
		return *e
	}
	return nil
}

// fail records a failed MPI call: the communicator is broken afterwards.
func (c *Comm) fail(call string, rc C.int) error {
	err := mpiErr(call, rc)
	c.broken.CompareAndSwap(nil, &err)
	return err
}

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// maxChunk bounds one MPI call's element count (MPI counts are C ints).
const maxChunk = math.MaxInt32 / 16 * 8

func (c *Comm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	if !dt.Valid() || !op.Valid() || len(buf)%dt.Size() != 0 {
		return fmt.Errorf("%w: mpi allreduce of %d bytes of %v with %v", backends.ErrInvalidArgument, len(buf), dt, op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	es := dt.Size()
	n := len(buf) / es
	if n == 0 {
		// Every member still takes part (a zero-length call keeps them in step).
		if rc := C.hvd_mpi_allreduce(nil, 0, C.int(dt), C.int(op), c.comm); rc != 0 {
			return c.fail("MPI_Allreduce", rc)
		}
		return nil
	}
	for off := 0; off < n; off += maxChunk {
		m := min(maxChunk, n-off)
		if rc := C.hvd_mpi_allreduce(unsafe.Pointer(&buf[off*es]), C.int(m), C.int(dt), C.int(op), c.comm); rc != 0 {
			return c.fail("MPI_Allreduce", rc)
		}
	}
	return nil
}

func (c *Comm) Broadcast(buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: mpi broadcast root %d of %d", backends.ErrInvalidArgument, root, c.size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	for off := 0; off == 0 || off < len(buf); off += maxChunk {
		m := min(maxChunk, len(buf)-off)
		if rc := C.hvd_mpi_bcast(ptr(buf[off:]), C.int(m), C.int(root), c.comm); rc != 0 {
			return c.fail("MPI_Bcast", rc)
		}
	}
	return nil
}

func equal(counts []int) bool {
	for _, n := range counts[1:] {
		if n != counts[0] {
			return false
		}
	}
	return true
}

// ints converts byte counts to C ints with their displacements.
func ints(counts []int) (cs, ds []C.int, total int, err error) {
	cs, ds = make([]C.int, len(counts)), make([]C.int, len(counts))
	for i, n := range counts {
		if n < 0 || total+n > math.MaxInt32 {
			return nil, nil, 0, fmt.Errorf("%w: mpi: counts %v exceed a C int of bytes (2 GiB) per call", backends.ErrUnsupported, counts)
		}
		cs[i], ds[i] = C.int(n), C.int(total)
		total += n
	}
	return cs, ds, total, nil
}

func (c *Comm) Allgatherv(send, recv []byte, counts []int) error {
	if len(counts) != c.size {
		return fmt.Errorf("%w: mpi allgatherv with %d counts for %d members", backends.ErrInvalidArgument, len(counts), c.size)
	}
	if equal(counts) && len(send) == counts[0] && len(recv) == len(send)*c.size && len(recv) <= math.MaxInt32 {
		// Every member gives the same count (the engine's status
		// exchange, fused allgathers of equal shapes): MPI_Allgather,
		// without count vectors.
		c.mu.Lock()
		defer c.mu.Unlock()
		if err := c.enter(); err != nil {
			return err
		}
		if rc := C.hvd_mpi_allgather(ptr(send), C.int(len(send)), ptr(recv), c.comm); rc != 0 {
			return c.fail("MPI_Allgather", rc)
		}
		return nil
	}
	cs, ds, total, err := ints(counts)
	if err != nil {
		return err
	}
	if len(send) != counts[c.rank] || len(recv) != total {
		return fmt.Errorf("%w: mpi allgatherv: send %d bytes (want %d), recv %d (want %d)", backends.ErrInvalidArgument, len(send), counts[c.rank], len(recv), total)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	if rc := C.hvd_mpi_allgatherv(ptr(send), C.int(len(send)), ptr(recv), &cs[0], &ds[0], c.comm); rc != 0 {
		return c.fail("MPI_Allgatherv", rc)
	}
	return nil
}

func (c *Comm) Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	if len(sendCounts) != c.size || len(recvCounts) != c.size {
		return fmt.Errorf("%w: mpi alltoallv with %d/%d counts for %d members", backends.ErrInvalidArgument, len(sendCounts), len(recvCounts), c.size)
	}
	sc, sd, st, err := ints(sendCounts)
	if err != nil {
		return err
	}
	rc_, rd, rt, err := ints(recvCounts)
	if err != nil {
		return err
	}
	if len(send) != st || len(recv) != rt {
		return fmt.Errorf("%w: mpi alltoallv: send %d bytes (counts say %d), recv %d (counts say %d)", backends.ErrInvalidArgument, len(send), st, len(recv), rt)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	if rc := C.hvd_mpi_alltoallv(ptr(send), &sc[0], &sd[0], ptr(recv), &rc_[0], &rd[0], c.comm); rc != 0 {
		return c.fail("MPI_Alltoallv", rc)
	}
	return nil
}

func (c *Comm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	if !dt.Valid() || !op.Valid() || len(counts) != c.size {
		return fmt.Errorf("%w: mpi reducescatter of %v with %v, %d counts for %d members", backends.ErrInvalidArgument, dt, op, len(counts), c.size)
	}
	es := dt.Size()
	cs, _, total, err := ints(counts)
	if err != nil || total > math.MaxInt32/es {
		return fmt.Errorf("%w: mpi reducescatter counts %v exceed one call", backends.ErrUnsupported, counts)
	}
	if len(send) != total*es || len(recv) != counts[c.rank]*es {
		return fmt.Errorf("%w: mpi reducescatter: send %d bytes (want %d), recv %d (want %d)", backends.ErrInvalidArgument, len(send), total*es, len(recv), counts[c.rank]*es)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	if total == 0 {
		return nil // every member sees the same zero counts
	}
	if rc := C.hvd_mpi_reduce_scatter(ptr(send), ptr(recv), &cs[0], C.int(dt), C.int(op), c.comm); rc != 0 {
		return c.fail("MPI_Reduce_scatter", rc)
	}
	return nil
}

func (c *Comm) Barrier() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enter(); err != nil {
		return err
	}
	if rc := C.hvd_mpi_barrier(c.comm); rc != 0 {
		return c.fail("MPI_Barrier", rc)
	}
	return nil
}

// mpiTag maps hvd's 32-bit tags into MPI's tag range (MPI_TAG_UB is at
// least 32767; Open MPI's is 2^31-1): tags that differ only above it are
// not told apart.
func mpiTag(tag uint32) C.int { return C.int(int64(tag) % int64(tagUB+1)) }

// Send and Recv are MPI_Send/MPI_Recv of bytes. The receive matches any
// tag and then checks tag and length, so a mismatch is an error naming both
// instead of a receive that never matches. Calls for distinct peers and
// directions run concurrently (MPI_THREAD_MULTIPLE); they must not overlap
// a collective on the same communicator (the SDK keeps a second one).
func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	if dst < 0 || dst >= c.size || dst == c.rank || len(buf) > math.MaxInt32 {
		return fmt.Errorf("%w: mpi send of %d bytes to %d (rank %d of %d)", backends.ErrInvalidArgument, len(buf), dst, c.rank, c.size)
	}
	if err := c.enter(); err != nil {
		return err
	}
	if rc := C.hvd_mpi_send(ptr(buf), C.int(len(buf)), C.int(dst), mpiTag(tag), c.comm); rc != 0 {
		return c.fail("MPI_Send", rc)
	}
	return nil
}

func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	if src < 0 || src >= c.size || src == c.rank || len(buf) > math.MaxInt32 {
		return fmt.Errorf("%w: mpi recv of %d bytes from %d (rank %d of %d)", backends.ErrInvalidArgument, len(buf), src, c.rank, c.size)
	}
	if err := c.enter(); err != nil {
		return err
	}
	var gotTag, got C.int
	if rc := C.hvd_mpi_recv(ptr(buf), C.int(len(buf)), C.int(src), &gotTag, &got, c.comm); rc != 0 {
		return c.fail(fmt.Sprintf("MPI_Recv of %d bytes from rank %d", len(buf), src), rc)
	}
	return c.checkRecv(src, tag, gotTag, got, len(buf))
}

func (c *Comm) checkRecv(src int, tag uint32, gotTag, got C.int, want int) error {
	if gotTag != mpiTag(tag) || int(got) != want {
		err := fmt.Errorf("%w: mpi: rank %d expected %d bytes with tag %d from rank %d, which sent %d bytes with tag %d",
			backends.ErrPeerFailure, c.rank, want, mpiTag(tag), src, got, gotTag)
		c.broken.CompareAndSwap(nil, &err)
		return err
	}
	return nil
}

// SendRecv is MPI_Sendrecv (backends.SendRecver).
func (c *Comm) SendRecv(sbuf []byte, dst int, stag uint32, rbuf []byte, src int, rtag uint32) error {
	if dst < 0 || dst >= c.size || src < 0 || src >= c.size || dst == c.rank || src == c.rank || len(sbuf) > math.MaxInt32 || len(rbuf) > math.MaxInt32 {
		return fmt.Errorf("%w: mpi sendrecv to %d from %d (rank %d of %d)", backends.ErrInvalidArgument, dst, src, c.rank, c.size)
	}
	if err := c.enter(); err != nil {
		return err
	}
	var gotTag, got C.int
	if rc := C.hvd_mpi_sendrecv(ptr(sbuf), C.int(len(sbuf)), C.int(dst), mpiTag(stag), ptr(rbuf), C.int(len(rbuf)), C.int(src), &gotTag, &got, c.comm); rc != 0 {
		return c.fail("MPI_Sendrecv", rc)
	}
	return c.checkRecv(src, rtag, gotTag, got, len(rbuf))
}

// Close marks the communicator closed and frees it when no collective is
// running (MPI cannot interrupt one: a collective in progress finishes or
// fails on its own, and the communicator is then left to MPI_Finalize).
func (c *Comm) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.mu.TryLock() {
		defer c.mu.Unlock()
		if !c.freed {
			c.freed = true
			C.hvd_mpi_comm_free(&c.comm)
		}
	}
	return nil
}

// raw runs Open MPI's own call for op (0 allreduce of float32 sums in
// place, 1 allgather of n bytes each, 2 broadcast from 0) on the set's
// communicator: the benchmark's anchor.
func (c *Comm) raw(op int, buf, recv []byte, n int) error {
	if rc := C.hvd_mpi_raw(C.int(op), ptr(buf), ptr(recv), C.int(n), c.comm); rc != 0 {
		return mpiErr("anchor", rc)
	}
	return nil
}
