package rendezvous

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hvdorg/hvd/backends"
)

// Topology is where a rank sits among hosts, computed from every rank's host
// key after rendezvous (Horovod's rule: local and cross ranks are computed,
// not trusted from the environment).
type Topology struct {
	// LocalRank is this rank's index among the ranks on its host (ascending
	// global rank); LocalSize is their count.
	LocalRank, LocalSize int
	// CrossRank is this host's index among the hosts that have a rank with
	// this LocalRank (hosts ordered by their lowest global rank); CrossSize
	// is the number of such hosts.
	CrossRank, CrossSize int
	// HostIndex is this rank's host's index in Hosts.
	HostIndex int
	// Hosts lists the global ranks on each host, ascending; hosts are
	// ordered by their lowest rank.
	Hosts [][]int
	// Homogeneous: every host has the same number of ranks.
	Homogeneous bool
}

// TopologyFromHosts computes rank's Topology from hostKeys[r], the host key
// of every rank r. It is pure; rank must index hostKeys (it panics
// otherwise, like a slice index).
func TopologyFromHosts(hostKeys []string, rank int) Topology {
	_ = hostKeys[rank]
	index := map[string]int{}
	var hosts [][]int
	for r, k := range hostKeys {
		h, ok := index[k]
		if !ok {
			h = len(hosts)
			index[k] = h
			hosts = append(hosts, nil)
		}
		hosts[h] = append(hosts[h], r)
	}
	t := Topology{Hosts: hosts, HostIndex: index[hostKeys[rank]], Homogeneous: true}
	mine := hosts[t.HostIndex]
	t.LocalSize = len(mine)
	for i, r := range mine {
		if r == rank {
			t.LocalRank = i
		}
	}
	for h, rs := range hosts {
		if len(rs) != len(hosts[0]) {
			t.Homogeneous = false
		}
		if len(rs) > t.LocalRank {
			if h < t.HostIndex {
				t.CrossRank++
			}
			t.CrossSize++
		}
	}
	return t
}

// ComputeTopology publishes hostKey as "topology/<rank>" in st, waits for
// every other rank's key (each st.Get waits, bounded by ctx and the store's
// own timeout) and returns TopologyFromHosts. Every rank of the round calls it
// once with the same size; st must be scoped to the round (e.g.
// Client.Store("global") of that epoch's client) so that keys of an earlier
// round are never read.
func ComputeTopology(ctx context.Context, st backends.Store, rank, size int, hostKey string) (Topology, error) {
	if size < 1 || rank < 0 || rank >= size {
		return Topology{}, fmt.Errorf("hvd: rendezvous: topology: rank %d is not in [0, %d)", rank, size)
	}
	if err := st.Set(ctx, "topology/"+strconv.Itoa(rank), []byte(hostKey)); err != nil {
		return Topology{}, fmt.Errorf("hvd: rendezvous: topology: rank %d publishing its host key: %w", rank, err)
	}
	// Every rank's key in one request where the store can (batch.go).
	vs, err := backends.GetRange(ctx, st, "topology/", 0, size)
	if err != nil {
		return Topology{}, fmt.Errorf("hvd: rendezvous: topology: rank %d waiting for the other ranks' host keys: %w", rank, err)
	}
	keys := make([]string, size)
	for r, v := range vs {
		keys[r] = string(v)
	}
	keys[rank] = hostKey
	return TopologyFromHosts(keys, rank), nil
}

// WorldScope is the store scope of a world's keys (epoch-mapped by the
// client): topology, communicator addresses, failure reasons. The sdk
// writes them; an elastic worker waiting for a peer reads TopologyKey there.
const WorldScope = "hvd"

// TopologyKey is the key under which rank publishes its host key: the first
// thing every rank of a round writes (an elastic worker that waits for a
// peer reads it to tell who has not joined).
func TopologyKey(rank int) string { return "topology/" + strconv.Itoa(rank) }

// HostKey returns the key that decides which ranks share a host:
//
//	hostname | boot id | network namespace | IPC namespace
//
// The boot id (/proc/sys/kernel/random/boot_id, else /etc/machine-id) tells
// kernels apart even when hostnames repeat; the namespace inodes (readlink
// /proc/self/ns/net and /proc/self/ns/ipc) make processes in different
// network namespaces (the `ip netns` multi-host tests) or different IPC
// namespaces (containers that cannot share /dev/shm) different hosts even
// when hostname and kernel are the same. Parts that cannot be read (non-Linux)
// are left empty. Cheap; safe from any goroutine.
func HostKey(hostname string) string {
	boot := readTrim("/proc/sys/kernel/random/boot_id")
	if boot == "" {
		boot = readTrim("/etc/machine-id")
	}
	netns, _ := os.Readlink("/proc/self/ns/net")
	ipcns, _ := os.Readlink("/proc/self/ns/ipc")
	return strings.Join([]string{hostname, boot, netns, ipcns}, "|")
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
