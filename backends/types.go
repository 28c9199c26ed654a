// Package backends moves bytes between the members of a process set. Backends
// know bytes, dtypes and peers; they know nothing about tensor names,
// negotiation or frameworks (that is package sdk).
//
// The package holds the contracts and what every backend shares: the
// Communicator (one per process set), the engine's two planes (ControlPlane,
// DataPlane, Pair: planes.go), where memory lives (Device: memory.go), the
// registry of backends (registry.go), dtypes and the reduction kernels
// (reduce.go, generated assembly), and the Store used to exchange addresses.
// Concrete backends live in subpackages: backends/tcp (any set), backends/shm
// (one host), backends/hier (sets that span hosts: shm inside, tcp between),
// backends/mpi (the MPI data plane, build tag mpi) and backends/nccl (the
// GPU data plane; NCCL loaded at run time); backends/conformance is the
// suite every backend runs. Each registers itself (registry.go).
package backends

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// DType is an element type. The numbering follows Horovod's wire enum
// (common/wire/message.fbs), with BFloat16 appended as Horovod does.
type DType uint8

const (
	Uint8 DType = iota
	Int8
	Uint16
	Int16
	Int32
	Int64
	Float16
	Float32
	Float64
	Bool
	BFloat16
	numDTypes
)

var dtypeNames = [...]string{"uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64", "bool", "bfloat16"}
var dtypeSizes = [...]int{1, 1, 2, 2, 4, 8, 2, 4, 8, 1, 2}

// AllDTypes lists every supported dtype, in enum order.
func AllDTypes() []DType {
	out := make([]DType, numDTypes)
	for i := range out {
		out[i] = DType(i)
	}
	return out
}

// Size is the element size in bytes (0 for an invalid dtype).
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypeSizes[d]
}

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool { return d < numDTypes }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float16 || d == Float32 || d == Float64 || d == BFloat16 }

func (d DType) String() string {
	if d >= numDTypes {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// ParseDType maps a name such as "float32" (also "f32", "fp16", "half",
// "bf16") to its DType.
func ParseDType(s string) (DType, error) {
	switch s {
	case "f16", "fp16", "half":
		return Float16, nil
	case "bf16":
		return BFloat16, nil
	case "f32", "fp32", "float":
		return Float32, nil
	case "f64", "fp64", "double":
		return Float64, nil
	}
	for i, n := range dtypeNames {
		if n == s {
			return DType(i), nil
		}
	}
	return 0, fmt.Errorf("hvd: unknown dtype %q (want one of %v)", s, dtypeNames)
}

// ReduceOp is an elementwise reduction. Average is not a backend op: sdk
// implements it as Sum with postscale 1/n, as Horovod does.
type ReduceOp uint8

const (
	Sum ReduceOp = iota
	Min
	Max
	Product
	numOps
)

var opNames = [...]string{"sum", "min", "max", "product"}

// AllOps lists every backend reduction.
func AllOps() []ReduceOp { return []ReduceOp{Sum, Min, Max, Product} }

func (o ReduceOp) String() string {
	if o >= numOps {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opNames[o]
}

// Valid reports whether o is a known reduction.
func (o ReduceOp) Valid() bool { return o < numOps }

// Communicator is the data plane of one process set. Ranks are ranks inside
// the communicator (0..Size-1), never global ranks: sdk translates.
//
// All collectives are blocking and must be called by every member in the same
// order with matching arguments; a mismatch that the wire can see (different
// op, byte count or root) is reported as an error naming the peer instead of
// corrupting data. Methods are not safe for concurrent use: sdk calls a
// communicator from one goroutine at a time (one per process set). Buffers
// are owned by the caller and are not retained after the call returns.
//
// After any error caused by a peer (death, closed connection, protocol
// mismatch, timeout) the communicator is broken: that call and every later
// one return an error wrapping ErrPeerFailure.
type Communicator interface {
	Rank() int
	Size() int

	// Allreduce reduces buf in place across all members. len(buf) must be a
	// multiple of dt.Size().
	Allreduce(buf []byte, dt DType, op ReduceOp) error

	// Allgatherv concatenates every member's send buffer in rank order into
	// recv. counts[r] is the byte count rank r contributes; len(send) must
	// equal counts[Rank()] and len(recv) the sum of counts.
	Allgatherv(send, recv []byte, counts []int) error

	// Broadcast copies root's buf into every member's buf (same length on all).
	Broadcast(buf []byte, root int) error

	// Alltoallv sends send[sdispl(j) : sdispl(j)+sendCounts[j]] to rank j and
	// receives recvCounts[j] bytes from rank j into recv in rank order.
	// Counts are bytes; displacements are the prefix sums of the counts.
	Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error

	// ReduceScatter reduces send across members and leaves in recv this
	// rank's block: counts[r] elements for rank r, blocks in rank order.
	// len(send) = sum(counts)·dt.Size(), len(recv) = counts[Rank()]·dt.Size().
	ReduceScatter(send, recv []byte, counts []int, dt DType, op ReduceOp) error

	// Barrier returns once every member has entered it.
	Barrier() error

	// Send delivers buf to rank dst; Recv receives exactly len(buf) bytes
	// from src. Messages between one pair are received in the order they
	// were sent, and tag and length must match (else an error, not
	// corruption). Send may block until the receiver reads (large messages;
	// on shared memory always: rendezvous).
	//
	// Concurrency: calls for distinct (peer, direction) pairs may run at
	// the same time from different goroutines — a send to rank 1 while a
	// receive from rank 1 and a send to rank 2 are in flight — and each
	// progresses on its own (the SDK's non-blocking send/recv rely on it).
	// Calls for one pair and direction are serialised. They must not run
	// concurrently with collectives on the same communicator (the SDK keeps
	// a separate communicator per set for point-to-point).
	Send(buf []byte, dst int, tag uint32) error
	Recv(buf []byte, src int, tag uint32) error

	// Close releases the connections; it is safe to call more than once.
	Close() error
}

// P2PTrier is implemented by backends that can attempt a point-to-point
// op without waiting (shm). A false result means nothing happened: the op
// must be issued again (as a blocking Send/Recv). The SDK uses it to finish
// non-blocking sends and receives on the caller's thread when they can
// complete at once (an eager send with room, a message already there).
type P2PTrier interface {
	TrySend(buf []byte, dst int, tag uint32) (bool, error)
	TryRecv(buf []byte, src int, tag uint32) (bool, error)
}

// SendPoster is implemented by backends whose large sends are read by the
// receiver from the sender's memory (shm): PostSend publishes the message
// without waiting and returns the wait for the receiver to have read it
// (posted false: nothing happened, send normally). The buffer must not
// change until wait returns.
type SendPoster interface {
	PostSend(buf []byte, dst int, tag uint32) (wait func() error, posted bool, err error)
}

// SendRecver is implemented by backends that progress a send and a receive
// together on the calling goroutine (MPI_Sendrecv): two ranks exchanging
// large messages with it cannot deadlock, and no second thread is needed.
type SendRecver interface {
	SendRecv(sbuf []byte, dst int, stag uint32, rbuf []byte, src int, rtag uint32) error
}

// Store is the key-value store used to exchange addresses when a
// communicator is built (the rendezvous store, or an in-memory one in tests).
type Store interface {
	// Set stores value under key, replacing any previous value.
	Set(ctx context.Context, key string, value []byte) error
	// Get waits until key exists and returns its value, or fails when ctx is
	// done.
	Get(ctx context.Context, key string) ([]byte, error)
}

// StoreDeleter is a Store that can remove keys (Horovod's store protocol
// has DELETE /<scope>/<key>). The store serving a job lives as long as the
// job, so a backend deletes the keys it published as soon as no peer can
// need them (tcp: its address once the mesh is up; shm: its member record
// and the segment name once every member attached); with a Store that lacks
// Delete those keys stay. Deleting an absent key is not an error.
type StoreDeleter interface {
	Store
	Delete(ctx context.Context, key string) error
}

// DeleteKeys removes keys from st when st is a StoreDeleter (best effort:
// the first error is returned, the rest are still tried) and does nothing
// otherwise.
func DeleteKeys(ctx context.Context, st Store, keys ...string) error {
	d, ok := st.(StoreDeleter)
	if !ok {
		return nil
	}
	var first error
	for _, k := range keys {
		if err := d.Delete(ctx, k); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Errors returned by backends; wrap with %w and test with errors.Is.
var (
	// ErrPeerFailure: a peer died, closed its connection, timed out or
	// violated the protocol. The communicator is unusable afterwards.
	ErrPeerFailure = errors.New("hvd: peer failure")
	// ErrInvalidArgument: the call's arguments are inconsistent locally.
	ErrInvalidArgument = errors.New("hvd: invalid argument")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("hvd: communicator closed")
	// ErrUnsupported: this backend cannot do what was asked.
	ErrUnsupported = errors.New("hvd: unsupported by backend")
)

// Stall is the optional watchdog of a communicator's waits: a wait that has
// made no progress because of one peer for Every is reported to Notice, and
// again every Every after that, until it moves, fails or times out. Notice
// is called from the waiting goroutine and must not block; peer is the
// communicator rank waited for. A zero Stall reports nothing.
type Stall struct {
	Notice func(op string, peer int, waited time.Duration)
	Every  time.Duration
}

// Watch returns a tick function for one wait started at start: call it
// whenever the wait re-checks; it calls Notice when the next report is due.
func (s Stall) Watch(start time.Time) func(op string, peer int) {
	if s.Notice == nil || s.Every <= 0 {
		return func(string, int) {}
	}
	next := start.Add(s.Every)
	return func(op string, peer int) {
		if now := time.Now(); !now.Before(next) {
			s.Notice(op, peer, now.Sub(start))
			next = now.Add(s.Every)
		}
	}
}

// PeerError describes a failure attributed to one peer.
type PeerError struct {
	Peer   int    // rank inside the communicator
	Global int    // global rank, or -1 when unknown
	Addr   string // peer address, if known
	Op     string // the operation that was running
	Err    error  // the underlying cause
}

func (e *PeerError) Error() string {
	who := fmt.Sprintf("rank %d", e.Peer)
	if e.Global >= 0 && e.Global != e.Peer {
		who = fmt.Sprintf("set rank %d (global rank %d)", e.Peer, e.Global)
	}
	if e.Addr != "" {
		who += " at " + e.Addr
	}
	op := ""
	if e.Op != "" {
		op = e.Op + ": "
	}
	return fmt.Sprintf("hvd: %s%s: %v", op, who, e.Err)
}

func (e *PeerError) Unwrap() []error { return []error{ErrPeerFailure, e.Err} }

// CheckCounts validates a per-rank count vector against size and returns its sum.
func CheckCounts(name string, counts []int, size int) (int, error) {
	if len(counts) != size {
		return 0, fmt.Errorf("%w: %s has %d entries, want one per rank (%d)", ErrInvalidArgument, name, len(counts), size)
	}
	total := 0
	for r, c := range counts {
		if c < 0 {
			return 0, fmt.Errorf("%w: %s[%d] = %d is negative", ErrInvalidArgument, name, r, c)
		}
		total += c
	}
	return total, nil
}

// DefaultSpin is the busy-poll budget before sleeping for localSize ranks
// on this host: none when ranks outnumber cores (a spinning rank would
// take the core a peer needs), else 50 µs.
func DefaultSpin(localSize int) time.Duration {
	if localSize > runtime.NumCPU() {
		return 0
	}
	return 50 * time.Microsecond
}
