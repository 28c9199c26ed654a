package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
		ListenHost: w.listen, ConnectTimeout: w.id.Timeout, OpTimeout: w.opTO,
		Spin: w.spin, LocalSize: w.topo.LocalSize,
	})
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
		ConnectTimeout: w.id.Timeout, OpTimeout: w.opTO,
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
