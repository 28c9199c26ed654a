package wiring

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The MPI bootstrap is a dependency ConnectStore is given: a fake one that
// hands out a store address is used as the MPI build's would be, and a
// build without MPI fails with what to do.
func TestConnectStoreMPIBootstrap(t *testing.T) {
	srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	launch := rendezvous.Identity{Rank: 1, Size: 2, Bootstrap: rendezvous.BootstrapMPI, Source: "openmpi", Timeout: time.Second}

	id := launch
	_, err = ConnectStore(StoreConfig{ID: &id, Timeout: time.Second, Backend: backends.Auto, MPI: BuildMPI()})
	if BuildMPI().Built() {
		t.Log("MPI build: the no-MPI case is not this build's")
	} else if !errors.Is(err, backends.ErrInvalidArgument) || !strings.Contains(err.Error(), "mpirun (openmpi variables: rank 1 of 2)") {
		t.Fatalf("without MPI: %v", err)
	}

	id = launch
	var gotBackend string
	fake := MPI{Bootstrap: func(id *rendezvous.Identity, backend string) error {
		gotBackend = backend
		id.StoreAddr, id.Bootstrap = srv.Addr(), ""
		return nil
	}}
	st, err := ConnectStore(StoreConfig{ID: &id, Timeout: time.Second, Backend: "tcp", MPI: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Client.Close()
	if gotBackend != "tcp" || id.StoreAddr != srv.Addr() || st.Server != nil {
		t.Fatalf("bootstrap got backend %q; identity %+v; server %v", gotBackend, id, st.Server)
	}
	ctx := context.Background()
	if err := st.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := st.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("the bootstrapped store: %q, %v", v, err)
	}
	if h, err := ListenHost(id); err != nil || h != "127.0.0.1" {
		t.Fatalf("listen host towards a loopback store: %q, %v", h, err)
	}
}
