// Package wiring builds a world's parts: its rendezvous store (ConnectStore:
// the store given, an in-memory one, rank 0's, or one found through an MPI
// bootstrap), the address its communicators listen on (ListenHost), and
// each process set's communicators from the backend registry (Builder).
// What it needs of MPI comes in explicitly (MPI, chosen by the build). The
// sdk owns the World and calls these in Start; this package knows no
// World, no engine and names no backend.
package wiring

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// WorldScope is the store scope of a world's keys (epoch-mapped by the
// client): topology, communicator addresses, failure reasons.
const WorldScope = rendezvous.WorldScope

// StoreConfig is what ConnectStore needs.
type StoreConfig struct {
	// ID is the rank's identity; an MPI bootstrap fills its store address
	// and secret.
	ID *rendezvous.Identity
	// Given, when set, replaces the rendezvous store (sdk.Config.Store).
	Given backends.Store
	// Generation tells apart successive Inits of one job (sdk.Config).
	Generation int
	// Timeout bounds the wait for rank 0's store and every store call.
	Timeout time.Duration
	// Backend is HVD_BACKEND's choice (auto or a backend's name).
	Backend string
	// MPI is this build's MPI (BuildMPI).
	MPI MPI
}

// Store is a world's rendezvous store: the world's scope, and the server
// (rank 0 of a torch-style launch) and client to close with the world.
type Store struct {
	backends.Store
	Server *rendezvous.Server
	Client *rendezvous.Client
}

// ConnectStore sets up the rendezvous store: the one given, an in-memory
// one for a single process, or the HTTP store (served by this process when
// it is torch-style rank 0).
func ConnectStore(c StoreConfig) (Store, error) {
	if c.ID.Bootstrap == rendezvous.BootstrapMPI && c.ID.StoreAddr == "" && c.Given == nil {
		if !c.MPI.Built() {
			return Store{}, NoMPIError(*c.ID)
		}
		if err := c.MPI.Bootstrap(c.ID, c.Backend); err != nil {
			return Store{}, err
		}
	}
	id := *c.ID
	switch {
	case c.Given != nil:
		return Store{Store: PrefixedStore{c.Given, fmt.Sprintf("e%d.g%d/", id.Epoch, c.Generation)}}, nil
	case id.StoreAddr == "" && id.Size == 1:
		return Store{Store: backends.NewMemStore()}, nil
	case id.AgentStore:
		return Store{}, fmt.Errorf("%w: MASTER_ADDR:MASTER_PORT (%s) is torchrun's agent store, a c10d TCPStore, which hvd cannot use: start with hvdrun, or run torchrun with TORCHELASTIC_USE_AGENT_STORE=False so that rank 0 serves hvd's store", backends.ErrInvalidArgument, id.StoreAddr)
	case id.StoreAddr == "":
		return Store{}, fmt.Errorf("%w: %d ranks but no rendezvous store address (set HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT or MASTER_ADDR/MASTER_PORT, or start with hvdrun)", backends.ErrInvalidArgument, id.Size)
	}
	var s Store
	if id.ServeStore {
		_, port, err := net.SplitHostPort(id.StoreAddr)
		if err != nil {
			return Store{}, fmt.Errorf("%w: store address %q: %v", backends.ErrInvalidArgument, id.StoreAddr, err)
		}
		srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: net.JoinHostPort(StoreBindHost(id.StoreAddr), port), Secret: id.Secret})
		if err != nil {
			return Store{}, fmt.Errorf("hvd: rank 0 could not serve the rendezvous store on port %s: %w", port, err)
		}
		s.Server = srv
	}
	if id.StoreByRank0 && !id.ServeStore {
		if err := WaitForStore(id.StoreAddr, c.Timeout); err != nil {
			return s, err
		}
	}
	s.Client = rendezvous.NewClient(rendezvous.ClientConfig{Addr: id.StoreAddr, Secret: id.Secret, Epoch: id.Epoch, Timeout: c.Timeout})
	scope := WorldScope
	// An MPI bootstrap's store is new for every Init (and the members of a
	// sub-communicator world may have made different numbers of Inits).
	if c.Generation > 0 && id.Bootstrap != rendezvous.BootstrapMPI {
		scope += ".g" + strconv.Itoa(c.Generation)
	}
	s.Store = s.Client.Store(scope)
	return s, nil
}

// WaitForStore waits until addr accepts TCP connections, for up to timeout:
// where rank 0 serves the store (torch-style launches), the other ranks may
// start first, and on a loaded machine rank 0 may take seconds to import
// its framework before it listens. The request retries that follow assume
// a running store.
func WaitForStore(addr string, timeout time.Duration) error {
	start := time.Now()
	delay := 50 * time.Millisecond
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Since(start)+delay > timeout {
			return fmt.Errorf("%w: rank 0's rendezvous store at %s did not accept connections within %v (last error: %v): is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same for every rank? (raise HOROVOD_GLOO_TIMEOUT_SECONDS if rank 0 starts slowly)",
				rendezvous.ErrUnavailable, addr, timeout, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// ListenHost picks the address a rank's communicators listen on:
// HOROVOD_GLOO_IFACE's IPv4 when set; 127.0.0.1 when the store is on
// loopback (single-host job); else the local address the kernel uses to
// reach the store (so it is reachable from the other hosts).
func ListenHost(id rendezvous.Identity) (string, error) {
	if id.Iface != "" {
		ifc, err := net.InterfaceByName(id.Iface)
		if err != nil {
			return "", fmt.Errorf("%w: HOROVOD_GLOO_IFACE=%s: %v", backends.ErrInvalidArgument, id.Iface, err)
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
		return "", fmt.Errorf("%w: HOROVOD_GLOO_IFACE=%s has no IPv4 address", backends.ErrInvalidArgument, id.Iface)
	}
	if id.StoreAddr == "" {
		return "127.0.0.1", nil
	}
	host, port, err := net.SplitHostPort(id.StoreAddr)
	if err != nil {
		return "", fmt.Errorf("%w: store address %q: %v", backends.ErrInvalidArgument, id.StoreAddr, err)
	}
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		return "127.0.0.1", nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, port)) // no packet is sent
	if err != nil {
		return "", fmt.Errorf("hvd: cannot find a local address towards the store %s: %w", id.StoreAddr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// StoreBindHost is where rank 0 serves the store of a torch-style launch
// (MASTER_ADDR:MASTER_PORT): only where the workers dial when that can be
// known — loopback for a loopback or localhost MASTER_ADDR, the address
// itself when it is one of this host's — else every interface (a
// Kubernetes service name or a NAT address is not a local interface; see
// docs/security.md).
func StoreBindHost(storeAddr string) string {
	host, _, err := net.SplitHostPort(storeAddr)
	if err != nil {
		return "0.0.0.0"
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		ips = nil
		if addrs, err := net.LookupIP(host); err == nil {
			ips = addrs
		}
	}
	if len(ips) == 0 {
		return "0.0.0.0"
	}
	if ips[0].IsLoopback() {
		if ip := net.ParseIP(host); ip != nil {
			return ip.String() // 127.0.0.1, ::1: exactly what the workers dial
		}
		return "127.0.0.1"
	}
	local, _ := net.InterfaceAddrs()
	for _, a := range local {
		if ipn, ok := a.(*net.IPNet); ok {
			for _, ip := range ips {
				if ipn.IP.Equal(ip) && ip.To4() != nil {
					return ip.String()
				}
			}
		}
	}
	return "0.0.0.0"
}

// PrefixedStore namespaces a shared store by epoch.
type PrefixedStore struct {
	St     backends.Store
	Prefix string
}

func (p PrefixedStore) Set(ctx context.Context, k string, v []byte) error {
	return p.St.Set(ctx, p.Prefix+k, v)
}
func (p PrefixedStore) Get(ctx context.Context, k string) ([]byte, error) {
	return p.St.Get(ctx, p.Prefix+k)
}
func (p PrefixedStore) TryGet(ctx context.Context, k string) ([]byte, bool, error) {
	return backends.TryGet(ctx, p.St, p.Prefix+k)
}

// Delete lets the backends remove the keys they published once no peer needs
// them (backends.StoreDeleter); without it keys of every set ever added
// would stay in the job's store.
func (p PrefixedStore) Delete(ctx context.Context, k string) error {
	return backends.DeleteKeys(ctx, p.St, p.Prefix+k)
}

var _ backends.StoreDeleter = PrefixedStore{}
