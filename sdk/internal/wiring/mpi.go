package wiring

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// MPI bootstrap: a job started by mpirun (Open MPI, MPICH/Hydra) with no
// store variable set (rendezvous.Identity.Bootstrap == BootstrapMPI) finds
// its rendezvous store through MPI: rank 0 serves the store on a free port
// and sends its address (and a fresh job secret) to the other ranks with
// MPI_Bcast. From Python, hvd.init does this with mpi4py before the library
// starts (python/hvd/common/mpi.py), so the library sees ordinary store
// variables; a Go program or a libhvd.so built with MPI (-tags mpi:
// mpi_mpi.go) does it here. Without either, Init fails saying what to do
// (NoMPIError). docs/mpi.md.

// MPI is what building a world needs of MPI. The build chooses it
// (BuildMPI: mpi_mpi.go with -tags mpi, mpi_nompi.go otherwise) and the sdk
// hands it to ConnectStore and Start's steps: an explicit dependency, not a
// hook some init() sets.
type MPI struct {
	// Bootstrap fills id's store address and secret for an MPI launch
	// without store variables (rank 0 serves the store for the process's
	// life); backend is HVD_BACKEND's choice (auto or a backend's name).
	// nil: this build has no MPI.
	Bootstrap func(id *rendezvous.Identity, backend string) error
	// Ready initializes MPI and checks its thread level (nil without MPI).
	// Start calls it before the rendezvous when HVD_BACKEND=mpi, so that
	// every rank refuses on its own, at once, instead of the first refusing
	// rank taking the store (rank 0 serves it under an MPI bootstrap) away
	// from ranks still in the rendezvous.
	Ready func() error
	// ThreadsSupported reports whether MPI runs with MPI_THREAD_MULTIPLE.
	ThreadsSupported func() bool
	// Finalize ends MPI when hvd initialized it.
	Finalize func()
}

// Built reports whether this build has MPI (-tags mpi).
func (m MPI) Built() bool { return m.Bootstrap != nil }

// NoMPIError is Init's error under mpirun without store variables in a
// build without MPI: what to do instead.
func NoMPIError(id rendezvous.Identity) error {
	return fmt.Errorf("%w: started by mpirun (%s variables: rank %d of %d) with no rendezvous store address, "+
		"and this build of hvd cannot reach the other ranks through MPI. Either: from Python, make mpi4py importable "+
		"(apt-get install python3-mpi4py, or pip install mpi4py) and hvd.init() bootstraps through it; "+
		"or use the MPI build (make build-mpi for Go programs, make python-mpi for libhvd.so; docs/mpi.md); "+
		"or give a store: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=<free port> (rank 0 serves it); "+
		"or launch with hvdrun --mpi", backends.ErrInvalidArgument, id.Source, id.Rank, id.Size)
}
