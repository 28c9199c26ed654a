//go:build mpi && cgo

#include "hvdmpi.h"
#include <stdlib.h>
#include <string.h>

// Reductions MPI cannot do with hvd's semantics (float16, bfloat16, bool,
// and float min/max with hvd's -0 < +0 and NaN rules) call back into Go's
// kernels (backends.Reduce): hvdMPIReduceCB in comm.go.
extern void hvdMPIReduceCB(int dt, int op, void *in, void *inout, int n);

#define FN(D, O) static void fn_##D##_##O(void *in, void *inout, int *len, MPI_Datatype *t) { (void)t; hvdMPIReduceCB(D, O, in, inout, *len); }
#define FNS(D) FN(D, 0) FN(D, 1) FN(D, 2) FN(D, 3)
FNS(6) FNS(7) FNS(8) FNS(9) FNS(10)
typedef void (*userfn)(void *, void *, int *, MPI_Datatype *);
#define ROW(D) {fn_##D##_0, fn_##D##_1, fn_##D##_2, fn_##D##_3}
static userfn fns[11][4] = {
	[6] = ROW(6), [7] = ROW(7), [8] = ROW(8), [9] = ROW(9), [10] = ROW(10),
};
static MPI_Op custom[11][4];

static MPI_Datatype dtype(int dt) {
	switch (dt) {
	case 0: return MPI_UINT8_T;
	case 1: return MPI_INT8_T;
	case 2: return MPI_UINT16_T;
	case 3: return MPI_INT16_T;
	case 4: return MPI_INT32_T;
	case 5: return MPI_INT64_T;
	case 6: return MPI_UINT16_T; // float16: custom ops only
	case 7: return MPI_FLOAT;
	case 8: return MPI_DOUBLE;
	case 9: return MPI_UINT8_T;  // bool: custom ops only
	case 10: return MPI_UINT16_T; // bfloat16: custom ops only
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Op reduce_op(int dt, int op) {
	int native = dt <= 5 || ((dt == 7 || dt == 8) && (op == 0 || op == 3));
	if (!native) return custom[dt][op];
	switch (op) {
	case 0: return MPI_SUM;
	case 1: return MPI_MIN;
	case 2: return MPI_MAX;
	case 3: return MPI_PROD;
	}
	return MPI_OP_NULL;
}

void hvd_mpi_finalize(void) {
	int fin = 0;
	MPI_Finalized(&fin);
	if (!fin) MPI_Finalize();
}

static void finalize_at_exit(void) { hvd_mpi_finalize(); }

int hvd_mpi_init(int *provided, int *we_initialized) {
	int inited = 0, fin = 0, rc;
	MPI_Finalized(&fin);
	if (fin) return -1;
	MPI_Initialized(&inited);
	*we_initialized = 0;
	if (!inited) {
		// Open MPI's own SIGSEGV/SIGBUS handlers would take the signals
		// the Go runtime relies on (nil checks, stack growth).
		setenv("OMPI_MCA_opal_signal", "", 0);
		rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
		if (rc != MPI_SUCCESS) return rc;
		*we_initialized = 1;
		atexit(finalize_at_exit);
	} else {
		MPI_Query_thread(provided);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	for (int d = 6; d <= 10; d++)
		for (int o = 0; o < 4; o++)
			if ((rc = MPI_Op_create(fns[d][o], 1, &custom[d][o])) != MPI_SUCCESS) return rc;
	return MPI_SUCCESS;
}

int hvd_mpi_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }

int hvd_mpi_world_rank(int *rank, int *size) {
	int rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_size(MPI_COMM_WORLD, size);
}

int hvd_mpi_tag_ub(void) {
	int *ub = NULL, flag = 0;
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
	return flag && ub ? *ub : 32767;
}

int hvd_mpi_comm_create(const int *world_ranks, int n, int tag, MPI_Comm *out) {
	MPI_Group world, g;
	int rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Group_incl(world, n, world_ranks, &g);
	MPI_Group_free(&world);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, out);
	MPI_Group_free(&g);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
}

int hvd_mpi_comm_world(MPI_Comm *out) {
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
}

int hvd_mpi_comm_free(MPI_Comm *c) { return MPI_Comm_free(c); }

int hvd_mpi_allreduce(void *buf, int count, int dt, int op, MPI_Comm c) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, count, dtype(dt), reduce_op(dt, op), c);
}

int hvd_mpi_bcast(void *buf, int count, int root, MPI_Comm c) {
	return MPI_Bcast(buf, count, MPI_BYTE, root, c);
}

int hvd_mpi_allgatherv(const void *send, int scount, void *recv, const int *counts, const int *displs, MPI_Comm c) {
	return MPI_Allgatherv(send, scount, MPI_BYTE, recv, counts, displs, MPI_BYTE, c);
}

int hvd_mpi_allgather(const void *send, int n, void *recv, MPI_Comm c) {
	return MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, c);
}

int hvd_mpi_alltoallv(const void *send, const int *scounts, const int *sdispls, void *recv, const int *rcounts, const int *rdispls, MPI_Comm c) {
	return MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, c);
}

int hvd_mpi_reduce_scatter(const void *send, void *recv, const int *counts, int dt, int op, MPI_Comm c) {
	return MPI_Reduce_scatter(send, recv, counts, dtype(dt), reduce_op(dt, op), c);
}

int hvd_mpi_barrier(MPI_Comm c) { return MPI_Barrier(c); }

int hvd_mpi_send(const void *buf, int count, int dst, int tag, MPI_Comm c) {
	return MPI_Send(buf, count, MPI_BYTE, dst, tag, c);
}

int hvd_mpi_recv(void *buf, int count, int src, int *tag, int *got, MPI_Comm c) {
	MPI_Status st;
	int rc = MPI_Recv(buf, count, MPI_BYTE, src, MPI_ANY_TAG, c, &st);
	if (rc != MPI_SUCCESS) return rc;
	*tag = st.MPI_TAG;
	return MPI_Get_count(&st, MPI_BYTE, got);
}

int hvd_mpi_sendrecv(const void *sbuf, int scount, int dst, int stag, void *rbuf, int rcount, int src, int *rtag, int *got, MPI_Comm c) {
	MPI_Status st;
	int rc = MPI_Sendrecv(sbuf, scount, MPI_BYTE, dst, stag, rbuf, rcount, MPI_BYTE, src, MPI_ANY_TAG, c, &st);
	if (rc != MPI_SUCCESS) return rc;
	*rtag = st.MPI_TAG;
	return MPI_Get_count(&st, MPI_BYTE, got);
}

void hvd_mpi_error_string(int code, char *buf, int len) {
	int n = 0;
	if (code == -1) {
		strncpy(buf, "MPI was already finalized", len - 1);
		buf[len - 1] = 0;
		return;
	}
	if (MPI_Error_string(code, buf, &n) != MPI_SUCCESS) n = 0;
	buf[n < len ? n : len - 1] = 0;
}

int hvd_mpi_allgather_world(const void *send, int n, void *recv) {
	MPI_Comm w;
	int rc = hvd_mpi_comm_world(&w);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, w);
	MPI_Comm_free(&w);
	return rc;
}

// The benchmark's anchor (bench_test.go): Open MPI's own calls, as a C
// program makes them, on the same communicator and buffers.
int hvd_mpi_raw(int op, void *buf, void *recv, int n, MPI_Comm c) {
	switch (op) {
	case 0: return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, c);
	case 1: return MPI_Allgather(buf, n, MPI_BYTE, recv, n, MPI_BYTE, c);
	case 2: return MPI_Bcast(buf, n, MPI_BYTE, 0, c);
	}
	return -1;
}
