//go:build mpi && cgo

package wiring

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"sync"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/mpi"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The MPI build (-tags mpi): the store bootstrap through MPI itself. The
// MPI data plane (backends/mpi) registers itself with its factory
// (backends/builtin imports it): a choice of HVD_BACKEND and of auto for
// sets that span hosts under mpirun.

// BuildMPI is this build's MPI: the bootstrap through MPI_COMM_WORLD and
// backends/mpi's initialization, thread level and finalization.
func BuildMPI() MPI {
	return MPI{Bootstrap: bootstrapOverMPI, Ready: mpi.Init, ThreadsSupported: mpi.ThreadsSupported, Finalize: mpi.Finalize}
}

// bootMsg is what MPI_COMM_WORLD rank 0 broadcasts: where its store
// listens and the job's secret.
type bootMsg struct {
	Addr   string `json:"addr,omitempty"`
	Secret []byte `json:"secret,omitempty"`
	Err    string `json:"err,omitempty"`
}

const bootHostBytes = 256

// goBoot is the Go bootstrap's result, for the process's life: rank 0's
// store keeps serving, and a later Init in the same processes (shutdown,
// then init) finds it again without MPI (its keys are kept apart by the
// Init's generation, as under hvdrun).
var goBoot struct {
	sync.Mutex
	done   bool
	addr   string
	secret []byte
	server *rendezvous.Server // rank 0
}

// bootstrapOverMPI: every rank gives its host key (MPI_Allgather); rank 0
// serves the store on a free port — on loopback when every rank shares its
// host, else on its HOROVOD_GLOO_IFACE or first non-loopback IPv4 address —
// and broadcasts the address and a fresh secret (unless HVD_SECRET_KEY is
// set) with MPI_Bcast. When every rank is on one host and HVD_BACKEND is
// not mpi, nothing else needs MPI (auto keeps shm there): MPI is finalized
// at once if hvd initialized it, so that a Go program's exit (os.Exit runs
// no C exit handlers) is not reported by mpirun as "exiting improperly".
func bootstrapOverMPI(id *rendezvous.Identity, backend string) error {
	goBoot.Lock()
	defer goBoot.Unlock()
	if goBoot.done {
		id.StoreAddr, id.Secret, id.ServeStore, id.Bootstrap = goBoot.addr, goBoot.secret, false, ""
		return nil
	}
	me, n, err := mpi.WorldRank()
	if err != nil {
		return fmt.Errorf("hvd: MPI bootstrap: %w", err)
	}
	if me != id.Rank || n != id.Size {
		return fmt.Errorf("%w: MPI bootstrap: the launcher's variables say rank %d of %d, but MPI_COMM_WORLD says rank %d of %d",
			backends.ErrInvalidArgument, id.Rank, id.Size, me, n)
	}
	host := make([]byte, bootHostBytes)
	copy(host, rendezvous.HostKey(id.Hostname)) // network namespaces that share a host name are hosts
	hosts, err := mpi.AllgatherWorld(host)
	if err != nil {
		return fmt.Errorf("hvd: MPI bootstrap: %w", err)
	}
	oneHost := true
	for r := 1; r < n; r++ {
		if !bytes.Equal(hosts[r*bootHostBytes:(r+1)*bootHostBytes], hosts[:bootHostBytes]) {
			oneHost = false
		}
	}
	buf := make([]byte, 4096)
	if me == 0 {
		msg := serveForMPI(*id, oneHost)
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
	// From here on the store is an ordinary one (like hvdrun's): keys of
	// successive Inits are kept apart by their generation.
	id.StoreAddr, id.Secret, id.ServeStore, id.Bootstrap = msg.Addr, msg.Secret, false, ""
	goBoot.done, goBoot.addr, goBoot.secret = true, msg.Addr, msg.Secret
	if oneHost && backend != "mpi" {
		mpi.Finalize()
	}
	return nil
}

// serveForMPI starts rank 0's store (for the process's life: goBoot) and
// says where it is.
func serveForMPI(id rendezvous.Identity, oneHost bool) bootMsg {
	ip := "127.0.0.1"
	if !oneHost {
		var err error
		if ip, err = routableIPv4(id.Iface); err != nil {
			return bootMsg{Err: err.Error()}
		}
	}
	secret := id.Secret
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
	goBoot.server = srv
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
