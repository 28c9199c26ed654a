package sim

import (
	"math"
	"slices"
	"time"

	"github.com/hvdorg/hvd/backends/tcp"
)

// Allreduce is a large allreduce's predicted time next to the bandwidth
// bound of the cost model.
type Allreduce struct {
	Bytes     int64
	Algorithm string
	Predicted time.Duration
	Bound     time.Duration // the bytes every host must put on its NIC, at the NIC's bandwidth
}

// PredictAllreduce is the time of an allreduce of bytes on n ranks as
// backends/hier runs it on a set that spans hosts with
// HOROVOD_HIERARCHICAL_ALLREDUCE (the default here; homogeneous hosts,
// ≥ 64 KiB: allreduceSplit): a shared-memory reduce-scatter inside each
// host (every rank folds its block from the L−1 others: one copy each), an
// allreduce of each block among the ranks of equal local rank across
// hosts (backends/tcp's pipelined ring: 2(H−1) steps of bytes/(L·H), the
// L rings of a host sharing its NIC), and a shared-memory allgather. On
// one host only the shared-memory legs run. Every step pays the link's
// latency and per-message CPU; the ring streams, so this is an upper
// estimate of the latency term.
//
// The bound is the cost model's: each host sends 2(H−1)/H·bytes through
// its NIC in any allreduce (ring or tree), at the NIC's bandwidth.
func PredictAllreduce(m Model, n int, bytes int64) Allreduce {
	L := min(m.HostSize, n)
	H := m.Hosts(n)
	secs := func(b float64, bw float64) time.Duration { return time.Duration(b / bw * 1e9) }
	block := float64(bytes) / float64(L)
	var t time.Duration
	if L > 1 {
		// reduce-scatter and allgather inside the host: L−1 blocks each.
		leg := time.Duration(L-1)*(m.Shm.Latency+2*m.Shm.CPU) + secs(float64(L-1)*block, m.Shm.Bandwidth)
		t += 2 * leg
	}
	var bound time.Duration
	if H > 1 {
		steps := 2 * (H - 1)
		perStep := float64(bytes) / float64(H) // L rings × block/H on one NIC
		t += time.Duration(steps)*(m.Net.Latency+2*m.Net.CPU) + secs(float64(steps)*perStep, m.Net.Bandwidth)
		bound = secs(2*float64(H-1)/float64(H)*float64(bytes), m.Net.Bandwidth)
	}
	return Allreduce{Bytes: bytes, Algorithm: "hier split (shm RS, cross-host ring, shm AG)", Predicted: t, Bound: bound}
}

// Connections counts the TCP connections of the rank of the global set of
// n ranks that holds the most, after a training step.
type Connections struct {
	Before int // every TCP communicator a full mesh (before issue 31)
	After  int // backends/tcp's rule (HVD_TCP_FULL_MESH_MAX at its default)
	Goal   int // 2·log2(n) + the host's local peers
}

// CountConnections applies backends/tcp's own rule to the communicators a
// rank holds (heldConnections), with the default threshold (After) and
// with every communicator a full mesh (Before).
func CountConnections(m Model, n int) Connections {
	return Connections{
		Before: heldConnections(m, n, math.MaxInt),
		After:  heldConnections(m, n, tcp.DefaultFullMeshMax),
		Goal:   2*log2ceil(n) + (min(m.HostSize, n) - 1),
	}
}

// heldConnections is the most TCP connections a rank of the global set of
// n ranks holds after a training step, each TCP communicator of size
// members above meshMax holding what backends/tcp connects at New
// (tcp.ConnectedAtStart: its recursive-doubling partners and ring
// neighbours), which is all a step uses (the status exchange, control
// messages and barrier on the flat one; the hierarchical allreduce's ring
// on the cross-host one). The set has two communicators (the engine's, and
// the point-to-point one a step does not use), each a backends/hier.Comm
// when the set spans hosts: a flat TCP communicator over the n members and
// one over the H ranks of its local rank (the leaders for local rank 0),
// shared memory inside the host (no TCP).
func heldConnections(m Model, n, meshMax int) int {
	L, H := min(m.HostSize, n), m.Hosts(n)
	if H < 2 {
		return 0 // one host: shared memory
	}
	held := func(rank, size int, p2p bool) int { return len(tcp.ConnectedAtStart(rank, size, meshMax, p2p)) }
	most := 0
	for r := range n {
		h := r / L // the hosts are filled in rank order
		k := held(r, n, false) + held(r, n, true) + held(h, H, false) + held(h, H, true)
		most = max(most, k)
	}
	return most
}

func log2ceil(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// PredictSmallAllreduce is a small allreduce (under backends/hier's split
// size, 64 KiB) on n ranks as backends/hier runs it (allreduceLeaders):
// each host's ranks reduce to their leader over shared memory, the
// leaders exchange directly (backends/tcp's small-message allreduce: every
// leader sends to every other), and each leader hands the result back over
// shared memory; on the Clock, so the NIC and per-message costs apply.
func PredictSmallAllreduce(m Model, n, bytes int) time.Duration {
	c := NewClock(m, n)
	var ls []int
	for r := 0; r < n; r += m.HostSize {
		ls = append(ls, r)
	}
	at := make([]time.Duration, n)
	for _, l := range ls {
		for r := l + 1; r < min(l+m.HostSize, n); r++ {
			at[l] = max(at[l], c.Send(r, l, bytes, 0, m.Shm))
		}
	}
	got := slices.Clone(at)
	for _, a := range ls {
		for _, b := range ls {
			if a != b {
				got[b] = max(got[b], c.Send(a, b, bytes, at[a], m.Net))
			}
		}
	}
	var end time.Duration
	for _, l := range ls {
		end = max(end, got[l])
		for r := l + 1; r < min(l+m.HostSize, n); r++ {
			end = max(end, c.Send(l, r, bytes, got[l], m.Shm))
		}
	}
	return end
}
