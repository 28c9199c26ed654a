package rendezvous

import (
	"strings"
	"testing"
)

// Under mpirun with no store variable the store is bootstrapped through MPI
// at Init: rank 0 serves it, nobody has an address yet.
func TestMPIBootstrapWithoutStore(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		rank int
	}{
		{"openmpi rank 0", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3"}, 0},
		{"openmpi rank 2", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 2},
		{"mpich rank 1", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := DetectIdentity(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			if id.Bootstrap != BootstrapMPI || id.StoreAddr != "" || id.ServeStore != (c.rank == 0) || id.Rank != c.rank {
				t.Fatalf("got %+v", id)
			}
		})
	}
	// A store variable wins: no bootstrap.
	env := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "5"}
	id, err := DetectIdentity(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || id.Bootstrap != "" || id.StoreAddr != "h:5" {
		t.Fatalf("with MASTER_*: %+v, %v", id, err)
	}
	// One process needs no store.
	env = map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
	if id, err = DetectIdentity(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil || id.Bootstrap != "" {
		t.Fatalf("size 1: %+v, %v", id, err)
	}
}

// hvd.init's mpi4py bootstrap hands the library rank 0's store and, for a
// world made of a sub-communicator, its rank and size.
func TestMPIBootstrapFromPython(t *testing.T) {
	env := map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
		"HVD_MPI_RANK": "0", "HVD_MPI_SIZE": "2", "HVD_MPI_LOCAL_RANK": "0", "HVD_MPI_LOCAL_SIZE": "2",
		"HVD_MPI_STORE_ADDR": "10.0.0.1:4567", "HVD_SECRET_KEY": "abcd"}
	id, err := DetectIdentity(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if id.Rank != 0 || id.Size != 2 || id.LocalSize != 2 || !id.ServeStore || id.StoreAddr != "10.0.0.1:4567" ||
		id.Bootstrap != BootstrapMPI || id.Source != SourceOpenMPI || len(id.Secret) != 2 {
		t.Fatalf("got %+v", id)
	}
	for k, want := range map[string]string{"HVD_MPI_STORE_ADDR": "HVD_MPI_STORE_ADDR=\"nope\" is not host:port", "HVD_MPI_SIZE": "HVD_MPI_RANK is set"} {
		bad := map[string]string{}
		for kk, v := range env {
			bad[kk] = v
		}
		if k == "HVD_MPI_STORE_ADDR" {
			bad[k] = "nope"
		} else {
			delete(bad, k)
		}
		_, err := DetectIdentity(func(k string) (string, bool) { v, ok := bad[k]; return v, ok })
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", k, err, want)
		}
	}
}
