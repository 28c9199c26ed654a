// Package mpi is hvd's MPI data plane: the backends.DataPlane contract
// (collectives, send/recv on host memory) on one MPI communicator per
// process set, for clusters whose fast interconnect only MPI reaches
// (InfiniBand, Slingshot, Omni-Path). Negotiation and idling stay on the
// set's host transport (tcp or shm): the SDK pairs the two
// (backends.NewPair), as for NCCL.
//
// It is built with cgo against the system MPI (Open MPI's libmpi, found
// with pkg-config ompi-c) behind the build tag "mpi" (make build-mpi,
// make python-mpi); the default build compiles only this file and
// built_other.go (Built reports false, nothing registers). docs/mpi.md says which build to pick.
//
// Requirements: MPI_THREAD_MULTIPLE (every process set's engine calls MPI
// from its own goroutine, so calls on different communicators run
// concurrently); the package initializes MPI itself (MPI_Init_thread,
// finalized at process exit) unless the process already did (mpi4py).
// A set's communicator is made with MPI_Comm_create_group from
// MPI_COMM_WORLD over its members' MPI_COMM_WORLD ranks, so only members
// take part and sets are built concurrently. Open MPI cannot interrupt a
// blocking call: HOROVOD_GLOO_TIMEOUT_SECONDS and Close do not bound an
// MPI collective; a dead rank ends the job through mpirun instead.
package mpi
