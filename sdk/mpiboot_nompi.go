//go:build !(mpi && cgo)

package sdk

// MPIThreadsSupported reports whether MPI runs with MPI_THREAD_MULTIPLE:
// never in a build without MPI.
func MPIThreadsSupported() bool { return false }

// FinalizeMPI does nothing in a build without MPI.
func FinalizeMPI() {}
