//go:build cgo && linux

package nccl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// No CUDA or NCCL header: the few types are declared here. Enums are passed
// as int (their C ABI), handles, streams and device addresses as uintptr_t.
typedef struct { char internal[128]; } hvdUniqueId;
typedef void* P;

static uintptr_t hvd_dlopen(const char* path) { return (uintptr_t)dlopen(path, RTLD_NOW | RTLD_GLOBAL); }
static uintptr_t hvd_dlsym(uintptr_t h, const char* name) { return (uintptr_t)dlsym((void*)h, name); }
static const char* hvd_dlerror(void) { const char* e = dlerror(); return e ? e : "unknown dlopen error"; }
static int c_intp(uintptr_t f, int* v) { return ((int (*)(int*))f)(v); }
static int c_int(uintptr_t f, int v) { return ((int (*)(int))f)(v); }
static int c_void(uintptr_t f) { return ((int (*)(void))f)(); }
static int c_ptr(uintptr_t f, uintptr_t p) { return ((int (*)(P))f)((P)p); }
static const char* c_str_int(uintptr_t f, int v) { return ((const char* (*)(int))f)(v); }
static const char* c_str_ptr(uintptr_t f, uintptr_t p) { return ((const char* (*)(P))f)((P)p); }

static int c_unique_id(uintptr_t f, hvdUniqueId* id) { return ((int (*)(hvdUniqueId*))f)(id); }
static int c_init_rank(uintptr_t f, uintptr_t* comm, int n, hvdUniqueId* id, int rank) {
	return ((int (*)(P*, int, hvdUniqueId, int))f)((P*)comm, n, *id, rank);
}
static int c_split(uintptr_t f, uintptr_t parent, int color, int key, uintptr_t* comm) {
	return ((int (*)(P, int, int, P*, P))f)((P)parent, color, key, (P*)comm, (P)0);
}
static int c_async_error(uintptr_t f, uintptr_t comm, int* r) { return ((int (*)(P, int*))f)((P)comm, r); }

static int c_allreduce(uintptr_t f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, uintptr_t comm, uintptr_t st) {
	return ((int (*)(P, P, size_t, int, int, P, P))f)((P)s, (P)r, n, dt, op, (P)comm, (P)st);
}
static int c_bcast(uintptr_t f, uintptr_t s, uintptr_t r, size_t n, int dt, int root, uintptr_t comm, uintptr_t st) {
	return ((int (*)(P, P, size_t, int, int, P, P))f)((P)s, (P)r, n, dt, root, (P)comm, (P)st);
}
static int c_reduce(uintptr_t f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, int root, uintptr_t comm, uintptr_t st) {
	return ((int (*)(P, P, size_t, int, int, int, P, P))f)((P)s, (P)r, n, dt, op, root, (P)comm, (P)st);
}
static int c_allgather(uintptr_t f, uintptr_t s, uintptr_t r, size_t n, int dt, uintptr_t comm, uintptr_t st) {
	return ((int (*)(P, P, size_t, int, P, P))f)((P)s, (P)r, n, dt, (P)comm, (P)st);
}
static int c_p2p(uintptr_t f, uintptr_t b, size_t n, int dt, int peer, uintptr_t comm, uintptr_t st) {
	return ((int (*)(P, size_t, int, int, P, P))f)((P)b, n, dt, peer, (P)comm, (P)st);
}
static int c_ptr_flags(uintptr_t f, uintptr_t* p, unsigned flags) { return ((int (*)(P*, unsigned))f)((P*)p, flags); }
static int c_ptr_ptr(uintptr_t f, uintptr_t a, uintptr_t b) { return ((int (*)(P, P))f)((P)a, (P)b); }
static int c_wait_event(uintptr_t f, uintptr_t s, uintptr_t e) { return ((int (*)(P, P, unsigned))f)((P)s, (P)e, 0); }
static int c_malloc(uintptr_t f, uintptr_t* p, size_t n) { return ((int (*)(P*, size_t))f)((P*)p, n); }
static int c_memcpy_async(uintptr_t f, uintptr_t d, uintptr_t s, size_t n, int kind, uintptr_t st) {
	return ((int (*)(P, P, size_t, int, P))f)((P)d, (P)s, n, kind, (P)st);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

const haveDL = true

// dlopen opens the first of names that loads; the error names every
// attempt with dlerror's reason.
func dlopen(names []string) (uintptr, string, error) {
	var tried []string
	for _, n := range names {
		cn := C.CString(n)
		h := C.hvd_dlopen(cn)
		C.free(unsafe.Pointer(cn))
		if h != 0 {
			return uintptr(h), n, nil
		}
		tried = append(tried, C.GoString(C.hvd_dlerror()))
	}
	return 0, "", fmt.Errorf("%s", strings.Join(tried, "; "))
}

// dlsym returns the address of name in the library h and its
// dependencies (0 when absent).
func dlsym(h uintptr, name string) uintptr {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	return uintptr(C.hvd_dlsym(C.uintptr_t(h), cn))
}

// dlLib is the table of the loaded libraries' functions.
type dlLib struct {
	f       map[string]uintptr
	version int
}

func (l *dlLib) fn(name string) C.uintptr_t { return C.uintptr_t(l.f[name]) }

func (l *dlLib) Version() (int, error) { return l.version, nil }
func (l *dlLib) HasSplit() bool        { return l.f["ncclCommSplit"] != 0 }

func (l *dlLib) GetUniqueID(id *UniqueID) Result {
	return Result(C.c_unique_id(l.fn("ncclGetUniqueId"), (*C.hvdUniqueId)(unsafe.Pointer(id))))
}

func (l *dlLib) CommInitRank(comm *CommHandle, nranks int, id UniqueID, rank int) Result {
	var h C.uintptr_t
	r := Result(C.c_init_rank(l.fn("ncclCommInitRank"), &h, C.int(nranks), (*C.hvdUniqueId)(unsafe.Pointer(&id)), C.int(rank)))
	*comm = CommHandle(h)
	return r
}

func (l *dlLib) CommSplit(parent CommHandle, color, key int, comm *CommHandle) Result {
	if !l.HasSplit() {
		return InvalidUsage
	}
	var h C.uintptr_t
	r := Result(C.c_split(l.fn("ncclCommSplit"), C.uintptr_t(parent), C.int(color), C.int(key), &h))
	*comm = CommHandle(h)
	return r
}

func (l *dlLib) CommAbort(comm CommHandle) Result {
	return Result(C.c_ptr(l.fn("ncclCommAbort"), C.uintptr_t(comm)))
}

func (l *dlLib) CommDestroy(comm CommHandle) Result {
	return Result(C.c_ptr(l.fn("ncclCommDestroy"), C.uintptr_t(comm)))
}

func (l *dlLib) CommGetAsyncError(comm CommHandle, async *Result) Result {
	var a C.int
	r := Result(C.c_async_error(l.fn("ncclCommGetAsyncError"), C.uintptr_t(comm), &a))
	*async = Result(a)
	return r
}

func (l *dlLib) GetErrorString(r Result) string {
	return C.GoString(C.c_str_int(l.fn("ncclGetErrorString"), C.int(r)))
}

func (l *dlLib) LastError(comm CommHandle) string {
	if l.f["ncclGetLastError"] == 0 {
		return ""
	}
	return C.GoString(C.c_str_ptr(l.fn("ncclGetLastError"), C.uintptr_t(comm)))
}

func (l *dlLib) AllReduce(send, recv Ptr, count int, dt DataType, op RedOp, comm CommHandle, s Stream) Result {
	return Result(C.c_allreduce(l.fn("ncclAllReduce"), C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count),
		C.int(dt), C.int(op), C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) Broadcast(send, recv Ptr, count int, dt DataType, root int, comm CommHandle, s Stream) Result {
	return Result(C.c_bcast(l.fn("ncclBroadcast"), C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count),
		C.int(dt), C.int(root), C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) Reduce(send, recv Ptr, count int, dt DataType, op RedOp, root int, comm CommHandle, s Stream) Result {
	return Result(C.c_reduce(l.fn("ncclReduce"), C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count),
		C.int(dt), C.int(op), C.int(root), C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) AllGather(send, recv Ptr, count int, dt DataType, comm CommHandle, s Stream) Result {
	return Result(C.c_allgather(l.fn("ncclAllGather"), C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count),
		C.int(dt), C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) ReduceScatter(send, recv Ptr, recvCount int, dt DataType, op RedOp, comm CommHandle, s Stream) Result {
	return Result(C.c_allreduce(l.fn("ncclReduceScatter"), C.uintptr_t(send), C.uintptr_t(recv), C.size_t(recvCount),
		C.int(dt), C.int(op), C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) Send(buf Ptr, count int, dt DataType, peer int, comm CommHandle, s Stream) Result {
	return Result(C.c_p2p(l.fn("ncclSend"), C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer),
		C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) Recv(buf Ptr, count int, dt DataType, peer int, comm CommHandle, s Stream) Result {
	return Result(C.c_p2p(l.fn("ncclRecv"), C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer),
		C.uintptr_t(comm), C.uintptr_t(s)))
}

func (l *dlLib) GroupStart() Result { return Result(C.c_void(l.fn("ncclGroupStart"))) }
func (l *dlLib) GroupEnd() Result   { return Result(C.c_void(l.fn("ncclGroupEnd"))) }

func (l *dlLib) SetDevice(dev int) CUDAError {
	return CUDAError(C.c_int(l.fn("cudaSetDevice"), C.int(dev)))
}

func (l *dlLib) GetDeviceCount(n *int) CUDAError {
	var v C.int
	e := CUDAError(C.c_intp(l.fn("cudaGetDeviceCount"), &v))
	*n = int(v)
	return e
}

// cudaStreamNonBlocking and cudaEventDisableTiming.
const (
	streamNonBlocking  = 1
	eventDisableTiming = 2
)

func (l *dlLib) StreamCreate(s *Stream) CUDAError {
	var v C.uintptr_t
	e := CUDAError(C.c_ptr_flags(l.fn("cudaStreamCreateWithFlags"), &v, streamNonBlocking))
	*s = Stream(v)
	return e
}

func (l *dlLib) StreamDestroy(s Stream) CUDAError {
	return CUDAError(C.c_ptr(l.fn("cudaStreamDestroy"), C.uintptr_t(s)))
}

func (l *dlLib) StreamWaitEvent(s Stream, e Event) CUDAError {
	return CUDAError(C.c_wait_event(l.fn("cudaStreamWaitEvent"), C.uintptr_t(s), C.uintptr_t(e)))
}

func (l *dlLib) EventCreate(e *Event) CUDAError {
	var v C.uintptr_t
	r := CUDAError(C.c_ptr_flags(l.fn("cudaEventCreateWithFlags"), &v, eventDisableTiming))
	*e = Event(v)
	return r
}

func (l *dlLib) EventRecord(e Event, s Stream) CUDAError {
	return CUDAError(C.c_ptr_ptr(l.fn("cudaEventRecord"), C.uintptr_t(e), C.uintptr_t(s)))
}

func (l *dlLib) EventQuery(e Event) CUDAError {
	return CUDAError(C.c_ptr(l.fn("cudaEventQuery"), C.uintptr_t(e)))
}

func (l *dlLib) EventDestroy(e Event) CUDAError {
	return CUDAError(C.c_ptr(l.fn("cudaEventDestroy"), C.uintptr_t(e)))
}

func (l *dlLib) Malloc(p *Ptr, n int) CUDAError {
	var v C.uintptr_t
	e := CUDAError(C.c_malloc(l.fn("cudaMalloc"), &v, C.size_t(n)))
	*p = Ptr(v)
	return e
}

func (l *dlLib) Free(p Ptr) CUDAError { return CUDAError(C.c_ptr(l.fn("cudaFree"), C.uintptr_t(p))) }

func (l *dlLib) MemcpyAsync(dst, src Ptr, n int, kind CopyKind, s Stream) CUDAError {
	return CUDAError(C.c_memcpy_async(l.fn("cudaMemcpyAsync"), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n),
		C.int(kind), C.uintptr_t(s)))
}

func (l *dlLib) CUDAErrorString(e CUDAError) string {
	return C.GoString(C.c_str_int(l.fn("cudaGetErrorString"), C.int(e)))
}

// getVersion calls ncclGetVersion at load time.
func getVersion(f uintptr) (int, Result) {
	var v C.int
	r := Result(C.c_intp(C.uintptr_t(f), &v))
	return int(v), r
}
