// C side of backends/mpi (build tag mpi): every MPI constant and call the Go
// side needs, behind plain ints, so that cgo never sees MPI's macros.
#include <mpi.h>
#include <stddef.h>

int hvd_mpi_init(int *provided, int *we_initialized);
int hvd_mpi_world_rank(int *rank, int *size);
int hvd_mpi_comm_create(const int *world_ranks, int n, int tag, MPI_Comm *out);
int hvd_mpi_comm_world(MPI_Comm *out);
int hvd_mpi_comm_free(MPI_Comm *c);
int hvd_mpi_allreduce(void *buf, int count, int dt, int op, MPI_Comm c);
int hvd_mpi_bcast(void *buf, int count, int root, MPI_Comm c);
int hvd_mpi_allgatherv(const void *send, int scount, void *recv, const int *counts, const int *displs, MPI_Comm c);
int hvd_mpi_allgather(const void *send, int n, void *recv, MPI_Comm c);
int hvd_mpi_alltoallv(const void *send, const int *scounts, const int *sdispls, void *recv, const int *rcounts, const int *rdispls, MPI_Comm c);
int hvd_mpi_reduce_scatter(const void *send, void *recv, const int *counts, int dt, int op, MPI_Comm c);
int hvd_mpi_barrier(MPI_Comm c);
int hvd_mpi_send(const void *buf, int count, int dst, int tag, MPI_Comm c);
int hvd_mpi_recv(void *buf, int count, int src, int *tag, int *got, MPI_Comm c);
int hvd_mpi_sendrecv(const void *sbuf, int scount, int dst, int stag, void *rbuf, int rcount, int src, int *rtag, int *got, MPI_Comm c);
void hvd_mpi_error_string(int code, char *buf, int len);
int hvd_mpi_tag_ub(void);
int hvd_mpi_thread_multiple(void);
void hvd_mpi_finalize(void);
int hvd_mpi_allgather_world(const void *send, int n, void *recv);
int hvd_mpi_raw(int op, void *buf, void *recv, int n, MPI_Comm c);
