// Package nccl is hvd's GPU data plane: a backends.DataPlane over NVIDIA's
// NCCL, loaded at run time.
//
// # Status: the GPU path, outside the default build
//
// Only builds with the tag hvd_nccl link this package (backends/builtin's
// nccl.go registers it); the default binaries do not offer
// HVD_BACKEND=nccl. It is tested on CPU with a fake NCCL and has not run on
// a GPU yet: docs/gpu.md says what is verified, and scripts/gpu-check.sh is
// the one command that runs it on a GPU.
//
// Nothing of CUDA or NCCL is needed to build hvd: the package opens
// libnccl.so.2 and the CUDA runtime (libcudart) with dlopen when a
// communicator is first built (Load), looks up the few functions it calls
// with dlsym, and calls them through a function table (the Lib interface).
// Without the libraries Load fails with an error naming every file it
// tried (ErrNotFound); without cgo the package builds and Load says so.
//
// # Shape
//
//   - lib.go: the NCCL and CUDA types this package declares itself (no
//     headers), and Lib, the function table; the dlsym'd table (dl_cgo.go)
//     and the fake in the tests (fake_test.go) both implement it.
//   - load.go: which files are tried, in which order, and the errors.
//   - comm.go: Comm, one NCCL communicator per process set: the collectives
//     on device memory, each enqueued on the tensor's CUDA stream and waited
//     for by polling the stream and ncclCommGetAsyncError (wait.go), which
//     turns an asynchronous NCCL error, a close or a timeout into an error
//     naming the set, and aborts the communicator so that nothing hangs.
//   - uniqueid.go: the ncclUniqueId exchange (through the set's control
//     plane or the rendezvous store) for ncclCommInitRank, and ncclCommSplit
//     where the loaded NCCL has it.
//   - staged.go: a host communicator that takes device buffers (copies them
//     to host memory and back): the cross-host leg of the hierarchical
//     allreduce (NCCL inside a host, TCP between hosts, as Horovod's).
//
// What a GPU has run and what only the fake has is listed in docs/gpu.md.
package nccl

import (
	"fmt"
	"unsafe"
)

// Result is ncclResult_t.
type Result int32

// The ncclResult_t values (nccl.h).
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
)

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"}

func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// DataType is ncclDataType_t.
type DataType int32

// The ncclDataType_t values (nccl.h; BFloat16 from NCCL 2.10).
const (
	NInt8     DataType = 0
	NUint8    DataType = 1
	NInt32    DataType = 2
	NUint32   DataType = 3
	NInt64    DataType = 4
	NUint64   DataType = 5
	NFloat16  DataType = 6
	NFloat32  DataType = 7
	NFloat64  DataType = 8
	NBFloat16 DataType = 9
)

// RedOp is ncclRedOp_t.
type RedOp int32

// The ncclRedOp_t values (nccl.h).
const (
	NSum  RedOp = 0
	NProd RedOp = 1
	NMax  RedOp = 2
	NMin  RedOp = 3
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID is ncclUniqueId: the bootstrap address rank 0 hands the others.
type UniqueID [UniqueIDBytes]byte

// SplitNoColor is NCCL_SPLIT_NOCOLOR: a rank of the parent that joins no
// communicator in ncclCommSplit.
const SplitNoColor = -1

// CommHandle is an ncclComm_t; Stream a cudaStream_t (0: the legacy
// default stream). Ptr is a device address.
type (
	CommHandle uintptr
	Stream     uintptr
	Event      uintptr
	Ptr        uintptr
)

// CUDAError is cudaError_t.
type CUDAError int32

const (
	cudaSuccess            CUDAError = 0
	cudaErrorNotReady      CUDAError = 600
	cudaMemcpyHostToDevice           = 1
	cudaMemcpyDeviceToHost           = 2
)

// CopyKind is a cudaMemcpyKind.
type CopyKind int32

// The copies this package makes.
const (
	HostToDevice CopyKind = cudaMemcpyHostToDevice
	DeviceToHost CopyKind = cudaMemcpyDeviceToHost
)

// Lib is the NCCL and CUDA runtime functions this package calls, one
// method per C function with the C argument order. The table loaded with
// dlopen (Load) and the tests' fake implement it. Methods are called from
// one goroutine per communicator, except Abort (any goroutine).
type Lib interface {
	// Version is ncclGetVersion (for example 21803 for 2.18.3).
	Version() (int, error)
	// HasSplit reports whether the library has ncclCommSplit (NCCL 2.18+).
	HasSplit() bool

	GetUniqueID(id *UniqueID) Result
	CommInitRank(comm *CommHandle, nranks int, id UniqueID, rank int) Result
	CommSplit(parent CommHandle, color, key int, comm *CommHandle) Result
	CommAbort(comm CommHandle) Result
	CommDestroy(comm CommHandle) Result
	CommGetAsyncError(comm CommHandle, async *Result) Result
	GetErrorString(r Result) string
	// LastError is ncclGetLastError (NCCL 2.13+; "" when absent).
	LastError(comm CommHandle) string

	AllReduce(send, recv Ptr, count int, dt DataType, op RedOp, comm CommHandle, s Stream) Result
	Broadcast(send, recv Ptr, count int, dt DataType, root int, comm CommHandle, s Stream) Result
	Reduce(send, recv Ptr, count int, dt DataType, op RedOp, root int, comm CommHandle, s Stream) Result
	AllGather(send, recv Ptr, count int, dt DataType, comm CommHandle, s Stream) Result
	ReduceScatter(send, recv Ptr, recvCount int, dt DataType, op RedOp, comm CommHandle, s Stream) Result
	Send(buf Ptr, count int, dt DataType, peer int, comm CommHandle, s Stream) Result
	Recv(buf Ptr, count int, dt DataType, peer int, comm CommHandle, s Stream) Result
	GroupStart() Result
	GroupEnd() Result

	// The CUDA runtime.
	SetDevice(dev int) CUDAError
	GetDeviceCount(n *int) CUDAError
	StreamCreate(s *Stream) CUDAError // cudaStreamCreateWithFlags(s, cudaStreamNonBlocking)
	StreamDestroy(s Stream) CUDAError
	StreamWaitEvent(s Stream, e Event) CUDAError
	EventCreate(e *Event) CUDAError // cudaEventCreateWithFlags(e, cudaEventDisableTiming)
	EventRecord(e Event, s Stream) CUDAError
	EventQuery(e Event) CUDAError // cudaSuccess, cudaErrorNotReady or an error
	EventDestroy(e Event) CUDAError
	Malloc(p *Ptr, n int) CUDAError
	Free(p Ptr) CUDAError
	MemcpyAsync(dst, src Ptr, n int, kind CopyKind, s Stream) CUDAError
	CUDAErrorString(e CUDAError) string
}

// addr is the address of b's first byte (0 for an empty slice). For device
// memory the slice spans device addresses, as the framework handed them
// over: it is never read or written from Go.
func addr(b []byte) Ptr {
	if len(b) == 0 {
		return 0
	}
	return Ptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// deviceSpan is n bytes at device address p as the []byte the
// Communicator methods take (never read or written from Go).
func deviceSpan(p Ptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}
