// A one-rank NCCL and CUDA runtime in host memory, built by dl_test.go
// (gcc -shared) so that the real dlopen/dlsym table and its C trampolines
// run on a machine without a GPU. Every entry point checks the arguments
// it can (the communicator, stream and event it issued, dtype, op, root,
// copy kind, the unique id passed by value) and fails with
// ncclInvalidArgument (4) / cudaErrorInvalidValue (1) otherwise, so a
// trampoline that passes arguments in the wrong order or width fails the
// conformance suite run over it.
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { int magic; int rank; } comm_t;
typedef struct { int magic; int polls; } event_t;

#define COMM_MAGIC 0x6e63636c
#define EVENT_MAGIC 0x65766e74
#define STREAM ((void*)0x5157)

static ncclUniqueId issued;
static char* mailbox; static size_t mailbox_len;

static int dtsize(int dt) {
	static const int sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
	return dt >= 0 && dt <= 9 ? sizes[dt] : 0;
}
static int ok_comm(void* c) { return c && ((comm_t*)c)->magic == COMM_MAGIC; }
static int ok_stream(void* s) { return s == STREAM || s == 0; }
static int ok_op(int op) { return op >= 0 && op <= 3; }
static int async_error(void) { const char* e = getenv("FAKE_NCCL_ASYNC_ERROR"); return e ? atoi(e) : 0; }

int ncclGetVersion(int* v) { *v = 21803; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) {
	for (int i = 0; i < 128; i++) issued.internal[i] = (char)(i * 7 + 3);
	*id = issued;
	return 0;
}
int ncclCommInitRank(void** comm, int n, ncclUniqueId id, int rank) {
	if (n != 1 || rank != 0 || memcmp(&id, &issued, sizeof id) != 0) return 4;
	comm_t* c = malloc(sizeof *c);
	c->magic = COMM_MAGIC; c->rank = rank;
	*comm = c;
	return 0;
}
int ncclCommAbort(void* c) { if (!ok_comm(c)) return 4; ((comm_t*)c)->magic = 0; free(c); return 0; }
int ncclCommDestroy(void* c) { return ncclCommAbort(c); }
int ncclCommGetAsyncError(void* c, int* r) { if (!ok_comm(c)) return 4; *r = async_error(); return 0; }
const char* ncclGetErrorString(int r) { return r == 6 ? "remote process exited or there was a network error" : "fake nccl error"; }

int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* c, void* st) {
	if (!dtsize(dt) || !ok_op(op) || !ok_comm(c) || !ok_stream(st)) return 4;
	memmove(r, s, n * dtsize(dt));
	return 0;
}
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* c, void* st) {
	if (!dtsize(dt) || root != 0 || !ok_comm(c) || !ok_stream(st)) return 4;
	memmove(r, s, n * dtsize(dt));
	return 0;
}
int ncclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* c, void* st) {
	if (!dtsize(dt) || !ok_op(op) || root != 0 || !ok_comm(c) || !ok_stream(st)) return 4;
	memmove(r, s, n * dtsize(dt));
	return 0;
}
int ncclAllGather(const void* s, void* r, size_t n, int dt, void* c, void* st) {
	if (!dtsize(dt) || !ok_comm(c) || !ok_stream(st)) return 4;
	memmove(r, s, n * dtsize(dt));
	return 0;
}
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* c, void* st) {
	return ncclAllReduce(s, r, n, dt, op, c, st);
}
int ncclSend(const void* b, size_t n, int dt, int peer, void* c, void* st) {
	if (!dtsize(dt) || peer != 0 || !ok_comm(c) || !ok_stream(st) || mailbox) return 4;
	mailbox_len = n * dtsize(dt);
	mailbox = malloc(mailbox_len + 1);
	memcpy(mailbox, b, mailbox_len);
	return 0;
}
int ncclRecv(void* b, size_t n, int dt, int peer, void* c, void* st) {
	if (!dtsize(dt) || peer != 0 || !ok_comm(c) || !ok_stream(st) || !mailbox || mailbox_len != n * dtsize(dt)) return 4;
	memcpy(b, mailbox, mailbox_len);
	free(mailbox); mailbox = 0;
	return 0;
}
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }

int cudaSetDevice(int d) { return d == 0 ? 0 : 101; }
int cudaGetDeviceCount(int* n) { *n = 1; return 0; }
int cudaStreamCreateWithFlags(void** s, unsigned flags) { if (flags != 1) return 1; *s = STREAM; return 0; }
int cudaStreamDestroy(void* s) { return s == STREAM ? 0 : 1; }
static int ok_event(void* e) { return e && ((event_t*)e)->magic == EVENT_MAGIC; }
int cudaStreamWaitEvent(void* s, void* e, unsigned flags) { return s == STREAM && ok_event(e) && flags == 0 ? 0 : 1; }
int cudaEventCreateWithFlags(void** e, unsigned flags) {
	if (flags != 2) return 1;
	event_t* ev = malloc(sizeof *ev);
	ev->magic = EVENT_MAGIC; ev->polls = 0;
	*e = ev;
	return 0;
}
int cudaEventRecord(void* e, void* s) { if (!ok_event(e) || !ok_stream(s)) return 1; ((event_t*)e)->polls = 2; return 0; }
int cudaEventQuery(void* e) {
	if (!ok_event(e)) return 1;
	event_t* ev = e;
	if (ev->polls > 0) { ev->polls--; return 600; }
	return 0;
}
int cudaEventDestroy(void* e) { if (!ok_event(e)) return 1; free(e); return 0; }
int cudaMalloc(void** p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFree(void* p) { free(p); return 0; }
int cudaMemcpyAsync(void* d, const void* s, size_t n, int kind, void* st) {
	if ((kind != 1 && kind != 2) || st != STREAM) return 1;
	memcpy(d, s, n);
	return 0;
}
const char* cudaGetErrorString(int e) { return e == 101 ? "invalid device ordinal" : "fake cuda error"; }
