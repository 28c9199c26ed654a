//go:build !(mpi && cgo)

package mpi

import "github.com/hvdorg/hvd/backends"

// Built reports whether this binary was built with MPI (-tags mpi).
func Built() bool { return false }

// The default build has no MPI: HVD_BACKEND=mpi says which build has it.
func init() {
	backends.Register(backends.Backend{Name: "mpi",
		Absent: "this hvd was built without MPI; use the MPI build (make build-mpi, make python-mpi: docs/mpi.md)"})
}
