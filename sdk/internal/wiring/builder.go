package wiring

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// Builder connects a world's communicators through the backend registry
// (package backends, registry.go): for each set it asks backends.Candidates
// which registered backend serves it and builds that backend's communicator
// with its factory (Backend.New); nothing here names a backend. A data
// plane without a control plane of its own (Backend.OwnControl false: MPI,
// NCCL) is paired with the control plane of the set's host transport
// (backends.ControlCandidates) by NewComm. sdk/backend.go says how auto
// chooses with the backends registered today.
type Builder struct {
	// ID is this rank's identity (Rank, Secret, Timeout are read).
	ID rendezvous.Identity
	// Topo is the world's topology (hosts and local ranks).
	Topo rendezvous.Topology
	// Store is the world's store; Listen the address communicators listen on.
	Store  backends.Store
	Listen string
	// Spin is HVD_SPIN_US (< 0: each backend's default).
	Spin time.Duration
	// Backend is HVD_BACKEND's choice (backends.Auto or a backend's name).
	Backend string
	// MPILaunch: an MPI launcher started the job (rendezvous.MPILaunched).
	MPILaunch bool
	// Settings are the parsed settings backends read (HierAllreduce and
	// HierAllgather also decide a set's backend).
	Settings backends.Settings
	// OpTimeout is HVD_COLLECTIVE_TIMEOUT_SECONDS (< 0 unset).
	OpTimeout time.Duration
	// Logf receives warnings (a fallback, a stalled peer).
	Logf func(format string, args ...any)
	// Activity says what set's engine is doing ("" when unknown), for the
	// stall notices of its collectives.
	Activity func(set int) string

	fallbackLogged atomic.Bool
}

// Mesh is one connected communicator of a set: the planes a set's engine
// runs on and the registered backend that built them (its label names the
// timeline's activities). Control is nil for a backend without a control
// plane of its own until NewComm pairs it (the engine's mesh only:
// point-to-point and hier's sub-communicators use Data alone).
type Mesh struct {
	backends.Planes
	Backend backends.Backend
}

// SetHash names a rank list compactly in store keys and handshakes.
func SetHash(ranks []int) string {
	h := fnv.New64a()
	for _, r := range ranks {
		fmt.Fprintf(h, "%d,", r)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// hostsOf groups ranks (global, ascending) by host, in the order of their
// lowest rank; the result holds indexes into ranks.
func (b *Builder) hostsOf(ranks []int) [][]int {
	hostOf := map[int]int{}
	for h, rs := range b.Topo.Hosts {
		for _, r := range rs {
			hostOf[r] = h
		}
	}
	var out [][]int
	index := map[int]int{}
	for i, r := range ranks {
		h := hostOf[r]
		j, ok := index[h]
		if !ok {
			j = len(out)
			index[h] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// NewComm connects this rank's communicator over ranks (global, ascending)
// for set setID; prefix separates the engine's mesh ("ps") from the p2p
// one ("p2p"); gen tells apart two builds of the same set.
func (b *Builder) NewComm(ctx context.Context, prefix string, setID int, gen int64, ranks []int) (Mesh, error) {
	name := prefix + strconv.Itoa(setID) + "-" + SetHash(ranks)
	if gen > 0 {
		name += "-g" + strconv.FormatInt(gen, 10)
	}
	m, err := b.connect(ctx, name, ranks, false)
	if err == nil && m.Control == nil && prefix == "ps" {
		m, err = b.pairControl(ctx, m, name, ranks)
	}
	return m, err
}

// setInfo is what the registry decides a set's backend from.
func (b *Builder) setInfo(ranks []int, hosts int, flat bool) backends.SetInfo {
	return backends.SetInfo{Size: len(ranks), Hosts: hosts, Flat: flat,
		HierAllreduce: b.Settings.HierAllreduce, HierAllgather: b.Settings.HierAllgather, MPILaunch: b.MPILaunch}
}

// connect builds a communicator over ranks with the first registered
// backend that serves the set and connects (see backends.Candidates);
// flat excludes composite backends (hier's own meshes).
func (b *Builder) connect(ctx context.Context, name string, ranks []int, flat bool) (Mesh, error) {
	hosts := b.hostsOf(ranks)
	cands, err := backends.Candidates(b.setInfo(ranks, len(hosts), flat), b.Backend)
	if err != nil {
		return Mesh{}, err
	}
	for i, c := range cands {
		m, err := b.dial(ctx, c, name, ranks, hosts)
		if err == nil {
			for _, failed := range cands[:i] {
				// Every member has read the failed backend's verdict: the
				// mesh that replaced it is up.
				b.abandoned(ctx, failed, name)
			}
			return m, nil
		}
		if b.Backend != backends.Auto || !errors.Is(err, backends.ErrUnsupported) || i == len(cands)-1 {
			return Mesh{}, err
		}
		if b.fallbackLogged.CompareAndSwap(false, true) {
			b.Logf("hvd: %v; using %s on this host instead", err, cands[i+1].Label)
		}
	}
	return Mesh{}, fmt.Errorf("hvd: no backend for %s", name) // not reached: the last candidate returned
}

// pairControl gives a data plane without a control plane of its own the
// control plane of the set's host transport (shm on one host, else tcp).
func (b *Builder) pairControl(ctx context.Context, m Mesh, name string, ranks []int) (Mesh, error) {
	var last error
	for _, c := range backends.ControlCandidates(b.setInfo(ranks, len(b.hostsOf(ranks)), true)) {
		cm, err := b.dial(ctx, c, name+"/ctl", ranks, b.hostsOf(ranks))
		if errors.Is(err, backends.ErrUnsupported) {
			last = err // shm that cannot be used here: the next one
			continue
		}
		if err != nil {
			m.Close()
			return Mesh{}, err
		}
		p, err := backends.NewPair(m.Data, cm.Control)
		if err != nil {
			m.Close()
			cm.Close()
			return Mesh{}, err
		}
		return Mesh{Planes: p.Planes(), Backend: m.Backend}, nil
	}
	m.Close()
	return Mesh{}, fmt.Errorf("%w: %s: no registered backend can carry the control plane of a %s data plane (%v)", backends.ErrUnsupported, name, m.Backend.Name, last)
}

// dial builds one registered backend's communicator with its factory (a
// backend with its own control plane returns both planes). hosts groups
// ranks' indexes by host (hostsOf).
func (b *Builder) dial(ctx context.Context, be backends.Backend, name string, ranks []int, hosts [][]int) (Mesh, error) {
	set, p2p := commRole(name)
	planes, err := be.New(ctx, backends.Build{
		Name: name, Store: b.Store,
		Rank: slices.Index(ranks, b.ID.Rank), Size: len(ranks), GlobalRanks: ranks, Hosts: hosts,
		LocalRank: b.Topo.LocalRank, LocalSize: b.Topo.LocalSize,
		Secret: b.ID.Secret, ListenHost: b.Listen, ConnectTimeout: b.ID.Timeout,
		OpTimeout: b.opTimeout(name), Stall: b.stallNotices(name, ranks),
		Spin: b.Spin, P2P: p2p, Set: fmt.Sprintf("process set %d", set),
		Settings: b.Settings,
		Flat: func(ctx context.Context, sub string, members []int) (backends.Communicator, error) {
			global := make([]int, len(members))
			for i, m := range members {
				global[i] = ranks[m]
			}
			return b.flatComm(ctx, sub, global)
		},
	})
	if err != nil {
		return Mesh{}, err
	}
	if planes.Data == nil || (be.OwnControl && planes.Control == nil) {
		planes.Close()
		return Mesh{}, fmt.Errorf("hvd: backend %s built %s without the planes it registered (data %v, own control %v)", be.Name, name, planes.Data != nil, be.OwnControl)
	}
	return Mesh{Planes: planes, Backend: be}, nil
}

// abandoned cleans up after a backend that failed for a set whose members
// then agreed on another one.
func (b *Builder) abandoned(ctx context.Context, be backends.Backend, name string) {
	if be.Abandon != nil {
		be.Abandon(ctx, b.Store, name)
	}
}

// flatComm is a flat communicator over ranks (one of hier's meshes, an
// NCCL set's host plane): shared memory when they all share a host (and the
// backend allows it), else TCP.
func (b *Builder) flatComm(ctx context.Context, name string, ranks []int) (backends.Communicator, error) {
	m, err := b.connect(ctx, name, ranks, true)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// Waiting on a live peer (one that is stopped, swapped out or stuck outside
// hvd, so its process is alive but sends nothing) is bounded, and reported
// while it lasts. Inside a collective every member is executing the same
// response list, so a peer that moves no byte for long is not merely busy:
// the engine's communicators fail after HOROVOD_GLOO_TIMEOUT_SECONDS (30 s by
// default), as Horovod's Gloo context's timeout bounds its collectives. A
// send/recv may legitimately wait for a peer that is computing, so the
// point-to-point communicators wait 30 minutes (torch.distributed's gloo
// default). HVD_COLLECTIVE_TIMEOUT_SECONDS, when set, is used for both.
// Until then the waiting rank logs, every stallEvery, whom it waits for, on
// which set and in which operation.

// commRole reads back what NewComm encoded in a communicator's name
// ("ps<id>-…" for the engine's, "p2p<id>-…" for point-to-point).
func commRole(name string) (set int, p2p bool) {
	p2p = strings.HasPrefix(name, "p2p")
	s := strings.TrimPrefix(strings.TrimPrefix(name, "p2p"), "ps")
	if i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		s = s[:i]
	}
	set, _ = strconv.Atoi(s)
	return set, p2p
}

// opTimeout is how long an operation of the communicator named name may
// wait without progress, and which setting says so.
func (b *Builder) opTimeout(name string) time.Duration {
	d, _ := b.opTimeoutSource(name)
	return d
}

func (b *Builder) opTimeoutSource(name string) (time.Duration, string) {
	if b.OpTimeout >= 0 {
		return b.OpTimeout, "HVD_COLLECTIVE_TIMEOUT_SECONDS"
	}
	if _, p2p := commRole(name); p2p {
		return 30 * time.Minute, "the send/recv default; HVD_COLLECTIVE_TIMEOUT_SECONDS changes it"
	}
	return b.ID.Timeout, "HOROVOD_GLOO_TIMEOUT_SECONDS"
}

// stallNotices reports, while it lasts, a wait on a live peer that makes no
// progress: every 10 s for collectives (a third of a shorter timeout),
// every minute for send/recv.
func (b *Builder) stallNotices(name string, ranks []int) backends.Stall {
	set, p2p := commRole(name)
	timeout, src := b.opTimeoutSource(name)
	every := 10 * time.Second
	if p2p {
		every = time.Minute
	}
	if timeout > 0 {
		every = min(every, max(timeout/3, 100*time.Millisecond))
	}
	fails := "never fails (HVD_COLLECTIVE_TIMEOUT_SECONDS=0)"
	if timeout > 0 {
		fails = fmt.Sprintf("fails after %v (%s)", timeout, src)
	}
	return backends.Stall{Every: every, Notice: func(op string, peer int, waited time.Duration) {
		what := op
		if !p2p && b.Activity != nil {
			if a := b.Activity(set); a != "" {
				what = a
			}
		}
		who := peer
		if peer >= 0 && peer < len(ranks) {
			who = ranks[peer]
		}
		b.Logf("hvd: process set %d: waited %v for rank %d in %s; that rank is alive but sends nothing (stopped, swapped out, or stuck outside hvd?); the operation %s",
			set, waited.Round(100*time.Millisecond), who, what, fails)
	}}
}
