package sdk

import "github.com/hvdorg/hvd/sdk/internal/wiring"

// MPI: what this build has of MPI is chosen at build time
// (sdk/internal/wiring: mpi_mpi.go with -tags mpi, mpi_nompi.go otherwise)
// and handed to Start's steps explicitly; the bootstrap through MPI under
// mpirun without store variables is wiring's too. docs/mpi.md.

// mpiBuilt reports whether this binary was built with MPI (-tags mpi).
func mpiBuilt() bool { return wiring.BuildMPI().Built() }

// MPIBuilt reports whether this binary was built with MPI (Horovod's
// mpi_built()).
func MPIBuilt() bool { return mpiBuilt() }

// MPIThreadsSupported reports whether MPI runs with MPI_THREAD_MULTIPLE
// (false when MPI is not initialized, and in a build without MPI).
func MPIThreadsSupported() bool { return wiring.BuildMPI().ThreadsSupported() }

// FinalizeMPI ends MPI when hvd initialized it: a Go program calls it
// before exiting (os.Exit skips C's exit handlers, and mpirun then reports
// the rank as exiting improperly); Python's exit runs it on its own. It
// does nothing in a build without MPI.
func FinalizeMPI() { wiring.BuildMPI().Finalize() }
