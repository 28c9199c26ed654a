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
	"github.com/hvdorg/hvd/backends/hier"
	"github.com/hvdorg/hvd/backends/shm"
	"github.com/hvdorg/hvd/backends/tcp"
)

// Data-plane selection (HVD_BACKEND or Config.Backend):
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
const (
	backendAuto = "auto"
	backendSHM  = "shm"
	backendTCP  = "tcp"
)

func parseBackend(s string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "", backendAuto:
		return backendAuto, nil
	case backendSHM, backendTCP:
		return v, nil
	}
	return "", fmt.Errorf("%w: HVD_BACKEND=%q: want auto, shm or tcp", ErrInvalidArgument, s)
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

// newComm connects this rank's communicator over ranks (global, ascending)
// for set setID; prefix separates the engine's mesh from the p2p one.
func (w *World) newComm(ctx context.Context, prefix string, setID int, gen int64, ranks []int) (backends.Communicator, error) {
	name := prefix + strconv.Itoa(setID) + "-" + setHash(ranks)
	if gen > 0 {
		name += "-g" + strconv.FormatInt(gen, 10)
	}
	hosts := w.hostsOf(ranks)
	if len(hosts) > 1 && w.backend != backendTCP && (w.knobs.hierAllreduce || w.knobs.hierAllgather) {
		return w.hierComm(ctx, name, ranks, hosts)
	}
	return w.hostComm(ctx, name, ranks, len(hosts) == 1)
}

// hostComm is a flat communicator over ranks: shared memory when they all
// share a host (and the backend allows it), else TCP.
func (w *World) hostComm(ctx context.Context, name string, ranks []int, oneHost bool) (backends.Communicator, error) {
	if len(ranks) > 1 && w.backend != backendTCP && oneHost {
		c, err := w.shmComm(ctx, name, ranks)
		if err == nil {
			return c, nil
		}
		if w.backend == backendSHM || !errors.Is(err, backends.ErrUnsupported) {
			return nil, err
		}
		if w.shmFallbackLogged.CompareAndSwap(false, true) {
			w.logf("hvd: %v; using TCP on this host instead", err)
		}
		tc, err := w.tcpComm(ctx, name, ranks)
		if err == nil {
			// Every member has read shm's verdict: the TCP mesh is up.
			backends.DeleteKeys(ctx, w.store, shm.SegmentKey(name+"/shm"))
		}
		return tc, err
	}
	return w.tcpComm(ctx, name, ranks)
}

func (w *World) tcpComm(ctx context.Context, name string, ranks []int) (backends.Communicator, error) {
	return tcp.New(ctx, tcp.Config{
		Store: w.store, Prefix: name,
		Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks), GlobalRanks: ranks, Secret: w.id.Secret,
		ListenHost: w.listen, ConnectTimeout: w.id.Timeout,
		OpTimeout: w.opTimeout(name), Stall: w.stallNotices(name, ranks),
		Spin: w.spin, LocalSize: w.topo.LocalSize, SendBuffer: tcpSendBuffer(w.knobs.tcpSndBuf),
		Encrypt: tcp.Encryption(w.knobs.encrypt),
	})
}

// tcpSendBuffer maps HVD_TCP_SNDBUF (-1 unset, 0 autotuning, n bytes) to
// tcp.Config.SendBuffer (0 choose, < 0 autotuning, n bytes).
func tcpSendBuffer(knob int) int {
	switch {
	case knob < 0:
		return 0
	case knob == 0:
		return -1
	}
	return knob
}

// Delete lets the backends remove the keys they published once no peer needs
// them (backends.StoreDeleter); without it keys of every set ever added
// would stay in the job's store.
func (p prefixedStore) Delete(ctx context.Context, k string) error {
	return backends.DeleteKeys(ctx, p.st, p.prefix+k)
}

var _ backends.StoreDeleter = prefixedStore{}

func (w *World) shmComm(ctx context.Context, name string, ranks []int) (backends.Communicator, error) {
	return shm.New(ctx, shm.Config{
		Store: w.store, Prefix: name + "/shm",
		Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks), GlobalRanks: ranks,
		ConnectTimeout: w.id.Timeout,
		OpTimeout:      w.opTimeout(name), Stall: w.stallNotices(name, ranks),
		Spin: w.spin, LocalSize: w.topo.LocalSize,
		SmallBytes: w.knobs.shmSmall, ChunkBytes: w.knobs.shmChunk, SlotBytes: w.knobs.shmSlot,
		// Only the set's point-to-point mesh sends messages; the engine's
		// needs no eager areas (up to 1 MiB of /dev/shm per rank).
		NoEager: !strings.HasPrefix(name, "p2p"),
	})
}

// hierComm composes shared-memory communicators inside each host with TCP
// between them; a flat TCP mesh carries everything that is not
// hierarchical. Sub-communicators are named after the set, so the same set
// built twice (the engine's and the p2p one) never mixes.
func (w *World) hierComm(ctx context.Context, name string, ranks []int, hosts [][]int) (backends.Communicator, error) {
	flat, err := w.tcpComm(ctx, name, ranks)
	if err != nil {
		return nil, err
	}
	c, err := hier.New(ctx, hier.Config{
		Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks), Hosts: hosts,
		Flat: flat, GlobalRanks: ranks,
		HierAllreduce: w.knobs.hierAllreduce, HierAllgather: w.knobs.hierAllgather,
		Dial: func(ctx context.Context, sub string, members []int) (backends.Communicator, error) {
			global := make([]int, len(members))
			for i, m := range members {
				global[i] = ranks[m]
			}
			return w.hostComm(ctx, name+"/"+sub, global, len(w.hostsOf(global)) == 1)
		},
	})
	if err != nil {
		flat.Close()
		return nil, err
	}
	return c, nil
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
