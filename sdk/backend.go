package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
	_ "github.com/hvdorg/hvd/backends/builtin" // the backends this build has register themselves
)

// Data-plane selection (HVD_BACKEND or Config.Backend) comes from the
// backend registry (package backends, registry.go): every backend package
// registers itself with a name, a timeline label, a preference and a way
// to decide whether it can serve a set; backends.Candidates orders them for
// a set. With the backends registered today:
//
//	auto (default)  a set whose members share a host uses shared memory,
//	                falling back to TCP (with one log line) when the members
//	                cannot share memory; a set that spans hosts uses
//	                hierarchical collectives (backends/hier: shared memory
//	                inside each host, TCP between hosts) for allreduce,
//	                allgather and broadcast, flat TCP for the rest.
//	shm             like auto, but a single-host set that cannot use shared
//	                memory is an error instead of a fallback.
//	tcp             TCP everywhere (loopback inside a host), flat.
//
// HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER choose, for sets that span
// hosts, whether allreduce / allgather go hierarchical. Unlike Horovod
// (default 0, and only with NCCL) both default to on here, because the
// shared-memory leg is faster than loopback TCP; set them to 0 to get flat
// TCP collectives.
// "Same host" is the host key of package rendezvous (hostname, boot id,
// network and IPC namespace); shm itself also checks user and PID
// namespace and that cross-memory attach is permitted, identically on every
// member.
//
// Adding a backend: its package registers itself (backends.Register) with
// a factory (Backend.New) that builds its communicator from a
// backends.Build (the set, the store, the timeouts and the parsed
// settings), and one line in backends/builtin imports it; nothing here
// names a backend. A data plane without a control plane of its own
// (Backend.OwnControl false: MPI, NCCL) is paired with the control plane of
// the set's host transport (backends.ControlCandidates) by newComm.
const backendAuto = backends.Auto

func parseBackend(s string) (string, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return backendAuto, nil
	}
	if slices.Contains(backends.Choices(), v) {
		return v, nil
	}
	if why := backends.Absent(v); why != "" {
		return "", fmt.Errorf("%w: HVD_BACKEND=%s: %s; or want %s", ErrInvalidArgument, v, why, orList(backends.Choices()))
	}
	return "", fmt.Errorf("%w: HVD_BACKEND=%q: want %s", ErrInvalidArgument, s, orList(backends.Choices()))
}

// BackendBuilt reports whether this build has the backend named name (the
// backend registry, filled by backends/builtin: mpi in the MPI build, nccl
// with -tags hvd_nccl): what Horovod's mpi_built()/nccl_built() ask.
func BackendBuilt(name string) bool {
	_, ok := backends.Lookup(name)
	return ok
}

// orList writes "a, b or c".
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// hostsOf groups ranks (global, ascending) by host, in the order of their
// lowest rank; the result holds indexes into ranks.
func (w *World) hostsOf(ranks []int) [][]int {
	hostOf := map[int]int{}
	for h, rs := range w.topo.Hosts {
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

// mesh is one connected communicator of a set: the planes a set's engine
// runs on and the registered backend that built them (its label names the
// timeline's activities). Control is nil for a backend without a control
// plane of its own until pairControl gives it one (the engine's mesh only:
// point-to-point and hier's sub-communicators use Data alone).
type mesh struct {
	backends.Planes
	backend backends.Backend
}

// newComm connects this rank's communicator over ranks (global, ascending)
// for set setID; prefix separates the engine's mesh from the p2p one.
func (w *World) newComm(ctx context.Context, prefix string, setID int, gen int64, ranks []int) (mesh, error) {
	name := prefix + strconv.Itoa(setID) + "-" + setHash(ranks)
	if gen > 0 {
		name += "-g" + strconv.FormatInt(gen, 10)
	}
	m, err := w.connect(ctx, name, ranks, false)
	if err == nil && m.Control == nil && prefix == "ps" {
		m, err = w.pairControl(ctx, m, name, ranks)
	}
	return m, err
}

// setInfo is what the registry decides a set's backend from.
func (w *World) setInfo(ranks []int, hosts int, flat bool) backends.SetInfo {
	return backends.SetInfo{Size: len(ranks), Hosts: hosts, Flat: flat,
		HierAllreduce: w.knobs.hierAllreduce, HierAllgather: w.knobs.hierAllgather, MPILaunch: w.mpiLaunch}
}

// connect builds a communicator over ranks with the first registered
// backend that serves the set and connects (see backends.Candidates);
// flat excludes composite backends (hier's own meshes).
func (w *World) connect(ctx context.Context, name string, ranks []int, flat bool) (mesh, error) {
	hosts := w.hostsOf(ranks)
	cands, err := backends.Candidates(w.setInfo(ranks, len(hosts), flat), w.backend)
	if err != nil {
		return mesh{}, err
	}
	for i, b := range cands {
		m, err := w.dial(ctx, b, name, ranks, hosts)
		if err == nil {
			for _, failed := range cands[:i] {
				// Every member has read the failed backend's verdict: the
				// mesh that replaced it is up.
				w.abandoned(ctx, failed, name)
			}
			return m, nil
		}
		if w.backend != backendAuto || !errors.Is(err, backends.ErrUnsupported) || i == len(cands)-1 {
			return mesh{}, err
		}
		if w.shmFallbackLogged.CompareAndSwap(false, true) {
			w.logf("hvd: %v; using %s on this host instead", err, cands[i+1].Label)
		}
	}
	return mesh{}, fmt.Errorf("hvd: no backend for %s", name) // not reached: the last candidate returned
}

// pairControl gives a data plane without a control plane of its own the
// control plane of the set's host transport (shm on one host, else tcp).
func (w *World) pairControl(ctx context.Context, m mesh, name string, ranks []int) (mesh, error) {
	var last error
	for _, b := range backends.ControlCandidates(w.setInfo(ranks, len(w.hostsOf(ranks)), true)) {
		cm, err := w.dial(ctx, b, name+"/ctl", ranks, w.hostsOf(ranks))
		if errors.Is(err, backends.ErrUnsupported) {
			last = err // shm that cannot be used here: the next one
			continue
		}
		if err != nil {
			m.Close()
			return mesh{}, err
		}
		p, err := backends.NewPair(m.Data, cm.Control)
		if err != nil {
			m.Close()
			cm.Close()
			return mesh{}, err
		}
		return mesh{Planes: p.Planes(), backend: m.backend}, nil
	}
	m.Close()
	return mesh{}, fmt.Errorf("%w: %s: no registered backend can carry the control plane of a %s data plane (%v)", backends.ErrUnsupported, name, m.backend.Name, last)
}

// dial builds one registered backend's communicator with its factory (a
// backend with its own control plane returns both planes). hosts groups
// ranks' indexes by host (hostsOf).
func (w *World) dial(ctx context.Context, b backends.Backend, name string, ranks []int, hosts [][]int) (mesh, error) {
	set, p2p := commRole(name)
	planes, err := b.New(ctx, backends.Build{
		Name: name, Store: w.store,
		Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks), GlobalRanks: ranks, Hosts: hosts,
		LocalRank: w.topo.LocalRank, LocalSize: w.topo.LocalSize,
		Secret: w.id.Secret, ListenHost: w.listen, ConnectTimeout: w.id.Timeout,
		OpTimeout: w.opTimeout(name), Stall: w.stallNotices(name, ranks),
		Spin: w.spin, P2P: p2p, Set: fmt.Sprintf("process set %d", set),
		Settings: w.knobs.backendSettings(),
		Flat: func(ctx context.Context, sub string, members []int) (backends.Communicator, error) {
			global := make([]int, len(members))
			for i, m := range members {
				global[i] = ranks[m]
			}
			return w.flatComm(ctx, sub, global)
		},
	})
	if err != nil {
		return mesh{}, err
	}
	if planes.Data == nil || (b.OwnControl && planes.Control == nil) {
		planes.Close()
		return mesh{}, fmt.Errorf("hvd: backend %s built %s without the planes it registered (data %v, own control %v)", b.Name, name, planes.Data != nil, b.OwnControl)
	}
	return mesh{Planes: planes, backend: b}, nil
}

// abandoned cleans up after a backend that failed for a set whose members
// then agreed on another one.
func (w *World) abandoned(ctx context.Context, b backends.Backend, name string) {
	if b.Abandon != nil {
		b.Abandon(ctx, w.store, name)
	}
}

// flatComm is a flat communicator over ranks (one of hier's meshes, an
// NCCL set's host plane): shared memory when they all share a host (and the
// backend allows it), else TCP.
func (w *World) flatComm(ctx context.Context, name string, ranks []int) (backends.Communicator, error) {
	m, err := w.connect(ctx, name, ranks, true)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// Delete lets the backends remove the keys they published once no peer needs
// them (backends.StoreDeleter); without it keys of every set ever added
// would stay in the job's store.
func (p prefixedStore) Delete(ctx context.Context, k string) error {
	return backends.DeleteKeys(ctx, p.st, p.prefix+k)
}

var _ backends.StoreDeleter = prefixedStore{}

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

// commRole reads back what newComm encoded in a communicator's name
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
func (w *World) opTimeout(name string) time.Duration {
	d, _ := w.opTimeoutSource(name)
	return d
}

func (w *World) opTimeoutSource(name string) (time.Duration, string) {
	if w.knobs.opTimeout >= 0 {
		return w.knobs.opTimeout, "HVD_COLLECTIVE_TIMEOUT_SECONDS"
	}
	if _, p2p := commRole(name); p2p {
		return 30 * time.Minute, "the send/recv default; HVD_COLLECTIVE_TIMEOUT_SECONDS changes it"
	}
	return w.id.Timeout, "HOROVOD_GLOO_TIMEOUT_SECONDS"
}

// stallNotices reports, while it lasts, a wait on a live peer that makes no
// progress: every 10 s for collectives (a third of a shorter timeout),
// every minute for send/recv.
func (w *World) stallNotices(name string, ranks []int) backends.Stall {
	set, p2p := commRole(name)
	timeout, src := w.opTimeoutSource(name)
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
		if !p2p {
			w.mu.RLock()
			ps := w.sets[set]
			w.mu.RUnlock()
			if ps != nil && ps.eng != nil {
				if a := ps.eng.Activity(); a != "" {
					what = a
				}
			}
		}
		who := peer
		if peer >= 0 && peer < len(ranks) {
			who = ranks[peer]
		}
		w.logf("hvd: process set %d: waited %v for rank %d in %s; that rank is alive but sends nothing (stopped, swapped out, or stuck outside hvd?); the operation %s",
			set, waited.Round(100*time.Millisecond), who, what, fails)
	}}
}
