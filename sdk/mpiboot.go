package sdk

import "fmt"

// MPI bootstrap: a job started by mpirun (Open MPI, MPICH/Hydra) with no
// store variable set (rendezvous.Identity.Bootstrap == BootstrapMPI) finds
// its rendezvous store through MPI: rank 0 serves the store on a free port
// and sends its address (and a fresh job secret) to the other ranks with
// MPI_Bcast. From Python, hvd.init does this with mpi4py before the library
// starts (python/hvd/common/mpi.py), so the library sees ordinary store
// variables; a Go program or a libhvd.so built with MPI (-tags mpi:
// mpiboot_mpi.go) does it here. Without either, Init fails saying what to
// do. docs/mpi.md.

// mpiBootstrapper is set by the MPI build; nil in the default build.
var mpiBootstrapper func(w *World) error

// mpiReady initializes MPI and checks its thread level (the MPI build);
// nil in the default build. Init calls it before the rendezvous when
// HVD_BACKEND=mpi, so that every rank refuses on its own, at once, instead
// of the first refusing rank taking the store (rank 0 serves it under an
// MPI bootstrap) away from ranks still in the rendezvous.
var mpiReady func() error

// mpiBuilt reports whether this binary was built with MPI (-tags mpi).
func mpiBuilt() bool { return mpiBootstrapper != nil }

// bootstrapMPI fills w.id.StoreAddr (and, on rank 0, w.server) for an MPI
// launch without store variables.
func (w *World) bootstrapMPI() error {
	if mpiBootstrapper != nil {
		return mpiBootstrapper(w)
	}
	return fmt.Errorf("%w: started by mpirun (%s variables: rank %d of %d) with no rendezvous store address, "+
		"and this build of hvd cannot reach the other ranks through MPI. Either: from Python, make mpi4py importable "+
		"(apt-get install python3-mpi4py, or pip install mpi4py) and hvd.init() bootstraps through it; "+
		"or use the MPI build (make build-mpi for Go programs, make python-mpi for libhvd.so; docs/mpi.md); "+
		"or give a store: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=<free port> (rank 0 serves it); "+
		"or launch with hvdrun --mpi", ErrInvalidArgument, w.id.Source, w.id.Rank, w.id.Size)
}

// MPIBuilt reports whether this binary was built with MPI (Horovod's
// mpi_built()).
func MPIBuilt() bool { return mpiBuilt() }
