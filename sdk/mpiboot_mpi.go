//go:build mpi && cgo

package sdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"slices"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/mpi"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The MPI build (-tags mpi): the store bootstrap through MPI itself, and
// the MPI data plane (backends/mpi) as a choice of HVD_BACKEND and of auto
// for sets that span hosts under mpirun.

func init() {
	mpiBootstrapper = bootstrapOverMPI
	backendChosen = func(name string) { mpi.Choose(name == "mpi") }
}

// bootMsg is what MPI_COMM_WORLD rank 0 broadcasts: where its store
// listens and the job's secret.
type bootMsg struct {
	Addr   string `json:"addr,omitempty"`
	Secret []byte `json:"secret,omitempty"`
	Err    string `json:"err,omitempty"`
}

const bootHostBytes = 256

// bootstrapOverMPI: every rank gives its hostname (MPI_Allgather); rank 0
// serves the store on a free port — on loopback when every rank shares its
// host, else on its HOROVOD_GLOO_IFACE or first non-loopback IPv4 address —
// and broadcasts the address and a fresh secret (unless HVD_SECRET_KEY is
// set) with MPI_Bcast.
func bootstrapOverMPI(w *World) error {
	me, n, err := mpi.WorldRank()
	if err != nil {
		return fmt.Errorf("hvd: MPI bootstrap: %w", err)
	}
	if me != w.id.Rank || n != w.id.Size {
		return fmt.Errorf("%w: MPI bootstrap: the launcher's variables say rank %d of %d, but MPI_COMM_WORLD says rank %d of %d",
			ErrInvalidArgument, w.id.Rank, w.id.Size, me, n)
	}
	host := make([]byte, bootHostBytes)
	copy(host, rendezvous.HostKey(w.id.Hostname)) // network namespaces that share a host name are hosts
	hosts, err := mpi.AllgatherWorld(host)
	if err != nil {
		return fmt.Errorf("hvd: MPI bootstrap: %w", err)
	}
	buf := make([]byte, 4096)
	if me == 0 {
		msg := w.serveForMPI(hosts, n)
		b, _ := json.Marshal(msg)
		if len(b) > len(buf) {
			b, _ = json.Marshal(bootMsg{Err: "bootstrap message too long"})
		}
		copy(buf, b)
	}
	if err := mpi.BcastWorld(buf, 0); err != nil {
		return fmt.Errorf("hvd: MPI bootstrap: %w", err)
	}
	var msg bootMsg
	if err := json.Unmarshal(bytes.TrimRight(buf, "\x00"), &msg); err != nil {
		return fmt.Errorf("hvd: MPI bootstrap: rank 0's message: %v", err)
	}
	if msg.Err != "" {
		return fmt.Errorf("hvd: MPI bootstrap: rank 0 could not serve the store: %s", msg.Err)
	}
	w.id.StoreAddr, w.id.Secret, w.id.ServeStore = msg.Addr, msg.Secret, false
	return nil
}

// serveForMPI starts rank 0's store and says where it is.
func (w *World) serveForMPI(hosts []byte, n int) bootMsg {
	same := true
	for r := 1; r < n; r++ {
		if !bytes.Equal(hosts[r*bootHostBytes:(r+1)*bootHostBytes], hosts[:bootHostBytes]) {
			same = false
		}
	}
	ip := "127.0.0.1"
	if !same {
		var err error
		if ip, err = routableIPv4(w.id.Iface); err != nil {
			return bootMsg{Err: err.Error()}
		}
	}
	secret := w.id.Secret
	if secret == nil {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return bootMsg{Err: err.Error()}
		}
	}
	srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: net.JoinHostPort(ip, "0"), Secret: secret})
	if err != nil {
		return bootMsg{Err: err.Error()}
	}
	w.server = srv
	_, port, _ := net.SplitHostPort(srv.Addr())
	return bootMsg{Addr: net.JoinHostPort(ip, port), Secret: secret}
}

// routableIPv4 is iface's IPv4 address when iface is set, else the first
// non-loopback IPv4 address of an interface that is up.
func routableIPv4(iface string) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		if (iface != "" && ifc.Name != iface) || ifc.Flags&net.FlagUp == 0 || (iface == "" && ifc.Flags&net.FlagLoopback != 0) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.String(), nil
			}
		}
	}
	if iface != "" {
		return "", fmt.Errorf("HOROVOD_GLOO_IFACE=%s has no IPv4 address", iface)
	}
	return "", fmt.Errorf("no non-loopback IPv4 address to serve the store on; set HOROVOD_GLOO_IFACE")
}

// mpiComm builds a set's MPI communicator (members exchange their
// MPI_COMM_WORLD ranks through the store).
func (w *World) mpiComm(ctx context.Context, name string, ranks []int) (backends.DataPlane, error) {
	return mpi.New(ctx, mpi.Config{Store: w.store, Prefix: name + "/mpi", Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks)})
}

// MPIThreadsSupported reports whether MPI runs with MPI_THREAD_MULTIPLE
// (false when MPI is not initialized).
func MPIThreadsSupported() bool { return mpi.ThreadsSupported() }

// FinalizeMPI ends MPI when hvd initialized it: a Go program calls it
// before exiting (os.Exit skips C's exit handlers, and mpirun then reports
// the rank as exiting improperly); Python's exit runs it on its own.
func FinalizeMPI() { mpi.Finalize() }
