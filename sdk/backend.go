package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/shm"
	"github.com/hvdorg/hvd/backends/tcp"
)

// Data-plane selection (HVD_BACKEND or Config.Backend):
//
//	auto (default)  a set whose members share a host uses shared memory,
//	                falling back to TCP (with one log line) when the members
//	                cannot share memory; a set that spans hosts uses TCP.
//	shm             like auto, but a single-host set that cannot use shared
//	                memory is an error instead of a fallback.
//	tcp             TCP everywhere (loopback inside a host).
//
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
func (w *World) newComm(ctx context.Context, prefix string, setID int, ranks []int) (backends.Communicator, error) {
	name := prefix + strconv.Itoa(setID) + "-" + setHash(ranks)
	if len(ranks) > 1 && w.backend != backendTCP && len(w.hostsOf(ranks)) == 1 {
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

func (w *World) shmComm(ctx context.Context, name string, ranks []int) (backends.Communicator, error) {
	return shm.New(ctx, shm.Config{
		Store: w.store, Prefix: name + "/shm",
		Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks), GlobalRanks: ranks,
		ConnectTimeout: w.id.Timeout, OpTimeout: w.opTO,
		Spin: w.spin, LocalSize: w.topo.LocalSize,
	})
}
