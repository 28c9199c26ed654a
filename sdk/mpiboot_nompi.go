//go:build !(mpi && cgo)

package sdk

import (
	"context"
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// mpiComm: the default build has no MPI data plane (backends/mpi is not
// registered, so dial never asks for it).
func (w *World) mpiComm(context.Context, string, []int) (backends.DataPlane, error) {
	return nil, fmt.Errorf("%w: hvd was built without MPI (make build-mpi, make python-mpi)", backends.ErrUnsupported)
}

// MPIThreadsSupported reports whether MPI runs with MPI_THREAD_MULTIPLE:
// never in a build without MPI.
func MPIThreadsSupported() bool { return false }

// FinalizeMPI does nothing in a build without MPI.
func FinalizeMPI() {}
