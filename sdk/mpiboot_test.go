package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Under mpirun without store variables, a build without MPI fails Init at
// once with what to do (mpi4py, the MPI build, a store, hvdrun --mpi).
func TestMPIBootstrapUnavailable(t *testing.T) {
	if mpiBuilt() {
		t.Skip("built with -tags mpi: the MPI bootstrap is tested under mpirun (backends/mpi, e2e/mpi_test.go)")
	}
	env := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
	_, err := Start(context.Background(), Config{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Start: %v, want ErrInvalidArgument", err)
	}
	for _, want := range []string{"mpirun (openmpi variables: rank 1 of 2)", "mpi4py", "make python-mpi", "MASTER_ADDR", "hvdrun --mpi"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}
