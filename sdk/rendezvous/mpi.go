package rendezvous

import "net"

// MPILaunched reports whether an MPI launcher started this process
// (mpirun/mpiexec of Open MPI: OMPI_COMM_WORLD_SIZE; of MPICH/Hydra:
// PMI_SIZE) or hvd's Python MPI bootstrap did (HVD_MPI_STORE_ADDR): launch
// variables, read here with the rest of the launch contract; the MPI
// backend's registry rule gets the answer (backends.SetInfo.MPILaunch).
func MPILaunched(getenv func(string) (string, bool)) bool {
	for _, v := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HVD_MPI_STORE_ADDR"} {
		if s, ok := getenv(v); ok && s != "" {
			return true
		}
	}
	return false
}

// mpiStore: under mpirun (Open MPI's OMPI_COMM_WORLD_*, MPICH/Hydra's PMI_*)
// with no store variable set, the store is found through MPI itself: rank 0
// serves it on a free port and its address reaches the other ranks over MPI
// (Identity.Bootstrap = BootstrapMPI). From Python, hvd.init does this with
// mpi4py before the library starts and passes the result in HVD_MPI_*
// variables (python/hvd/common/mpi.py):
//
//	HVD_MPI_STORE_ADDR  rank 0's store, "host:port" (rank 0 serves it there)
//	HVD_MPI_RANK/_SIZE  the world when it is a communicator other than
//	                    MPI_COMM_WORLD (hvd.init(comm=...)), with
//	HVD_MPI_LOCAL_RANK/_LOCAL_SIZE as hints
//
// Without HVD_MPI_STORE_ADDR, StoreAddr stays "" and the SDK's MPI build
// bootstraps at Init (sdk/internal/wiring/mpi_mpi.go); a build without MPI fails Init
// with what to do (sdk/internal/wiring/mpi.go).
func (e env) mpiStore(id *Identity) (bool, error) {
	id.Bootstrap = BootstrapMPI
	r, s, ok, err := e.pair("HVD_MPI_RANK", "HVD_MPI_SIZE")
	if err != nil {
		return true, err
	}
	if ok {
		src := id.Source
		if err := e.generic(id, src, "HVD_MPI_RANK", "HVD_MPI_SIZE", "HVD_MPI_LOCAL_RANK", "HVD_MPI_LOCAL_SIZE", "", ""); err != nil {
			return true, err
		}
		id.Rank, id.Size, id.Bootstrap = r, s, BootstrapMPI
		if err := e.common(id); err != nil {
			return true, err
		}
	}
	id.ServeStore = id.Rank == 0
	if a, ok := e.str("HVD_MPI_STORE_ADDR"); ok {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return true, envErr("HVD_MPI_STORE_ADDR=%q is not host:port: %v", a, err)
		}
		id.StoreAddr = a
	}
	return true, nil
}
