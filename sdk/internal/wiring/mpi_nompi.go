//go:build !(mpi && cgo)

package wiring

// BuildMPI is this build's MPI: none (no bootstrap, no data plane; MPI
// threads never supported, nothing to finalize).
func BuildMPI() MPI {
	return MPI{ThreadsSupported: func() bool { return false }, Finalize: func() {}}
}
