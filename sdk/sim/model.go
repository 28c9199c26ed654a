// Package sim is hvd's scale simulator: N ranks in one process, on a
// simulated clock, running hvd's own code where it is pure — the engine's
// negotiation steps (classify, decide, the coordinator, fusion, the
// response cache and the wire codec, through engine.Member), the elastic
// driver's decisions (internal/launch) and the real rendezvous store
// (measured, not simulated: its HTTP server on loopback with N in-process
// clients). Messages between ranks cost what a per-link model says
// (Model): inside a host shared memory or loopback TCP, between hosts
// latency plus the host NIC's bandwidth, each with a per-message CPU
// cost; the CPU time of the pure steps is measured as they run and added
// to the rank's clock.
//
// It is a tool (cmd/hvdsim, make simulate), not part of the training API.
package sim

import (
	"fmt"
	"time"
)

// Link is the cost of one message over one kind of link: the sender's and
// the receiver's CPU per message, the wire latency and the bandwidth.
type Link struct {
	CPU       time.Duration // per message, at each end
	Latency   time.Duration
	Bandwidth float64 // bytes per second
}

// cost is the time a sender is busy putting bytes on the link.
func (l Link) busy(bytes int) time.Duration {
	return l.CPU + time.Duration(float64(bytes)/l.Bandwidth*1e9)
}

// Model is the cluster: hosts of HostSize ranks (rank r on host r/HostSize),
// and the three kinds of link a message can take.
type Model struct {
	HostSize int
	Shm      Link // same host, shared memory (backends/shm)
	Loopback Link // same host, TCP over loopback (the flat TCP mesh)
	Net      Link // between hosts, TCP; Bandwidth is the host NIC's, shared by its ranks
}

// DefaultModel: hosts of 8 ranks on a 100 Gb/s network with a TCP
// message at 15 µs one way and 2 µs of CPU per message at each end;
// shared memory at 0.5 µs and 10 GB/s (one copy), loopback TCP at 5 µs
// and 5 GB/s. Round figures for a current cluster without RDMA; change
// them with cmd/hvdsim's flags.
func DefaultModel() Model {
	return Model{
		HostSize: 8,
		Shm:      Link{CPU: 200 * time.Nanosecond, Latency: 500 * time.Nanosecond, Bandwidth: 10e9},
		Loopback: Link{CPU: 2 * time.Microsecond, Latency: 5 * time.Microsecond, Bandwidth: 5e9},
		Net:      Link{CPU: 2 * time.Microsecond, Latency: 15 * time.Microsecond, Bandwidth: 12.5e9},
	}
}

// Validate checks the model's figures.
func (m Model) Validate() error {
	if m.HostSize < 1 {
		return fmt.Errorf("hvd: sim: host size %d: want at least 1", m.HostSize)
	}
	for _, l := range []struct {
		name string
		l    Link
	}{{"shm", m.Shm}, {"loopback", m.Loopback}, {"net", m.Net}} {
		if l.l.Bandwidth <= 0 || l.l.CPU < 0 || l.l.Latency < 0 {
			return fmt.Errorf("hvd: sim: %s link %+v: want a positive bandwidth and no negative time", l.name, l.l)
		}
	}
	return nil
}

// Host is the host index of rank r.
func (m Model) Host(r int) int { return r / m.HostSize }

// Hosts is the number of hosts n ranks fill.
func (m Model) Hosts(n int) int { return (n + m.HostSize - 1) / m.HostSize }

// Clock is the simulated time of every rank, in one negotiation or
// collective: when each rank's sending side and receiving side are next
// free, and, between hosts, when each host's NIC is. A message's sender is
// busy for its CPU cost and the bytes at the link's bandwidth; it arrives a
// latency later; the receiver then spends its CPU cost. Messages are
// charged in the order the caller sends them (a simplification: a real
// receiver serves arrivals in arrival order).
type Clock struct {
	m          Model
	send, recv []time.Duration
	nic        []time.Duration // per host, the egress side
	bytesIn    []int64
	bytesOut   []int64
	msgs       []int // messages received, per rank
}

// NewClock returns a clock for n ranks, all at time 0.
func NewClock(m Model, n int) *Clock {
	return &Clock{m: m, send: make([]time.Duration, n), recv: make([]time.Duration, n),
		nic: make([]time.Duration, m.Hosts(n)), bytesIn: make([]int64, n), bytesOut: make([]int64, n), msgs: make([]int, n)}
}

// Send charges one message of bytes from a to b over link (Shm, Loopback,
// or — when a and b are on different hosts — always Net), sent no earlier
// than at; it returns when b has received it.
func (c *Clock) Send(a, b, bytes int, at time.Duration, local Link) time.Duration {
	l := local
	ha, hb := c.m.Host(a), c.m.Host(b)
	start := max(at, c.send[a])
	var done time.Duration
	if ha != hb {
		// The sender's CPU, then the bytes wait for the host's NIC.
		l = c.m.Net
		c.send[a] = start + l.CPU
		done = max(c.send[a], c.nic[ha]) + l.busy(bytes) - l.CPU
		c.nic[ha] = done
	} else {
		// Inside a host the sender copies the bytes itself.
		done = start + l.busy(bytes)
		c.send[a] = done
	}
	got := max(done+l.Latency, c.recv[b]) + l.CPU
	c.recv[b] = got
	c.bytesOut[a] += int64(bytes)
	c.bytesIn[b] += int64(bytes)
	c.msgs[b]++
	return got
}

// Work charges d of CPU to rank r from at; it returns when r is done.
func (c *Clock) Work(r int, at, d time.Duration) time.Duration {
	t := max(at, c.send[r], c.recv[r]) + d
	c.send[r], c.recv[r] = t, t
	return t
}

// Bytes is what rank r received and sent so far.
func (c *Clock) Bytes(r int) (in, out int64) { return c.bytesIn[r], c.bytesOut[r] }

// Messages is how many messages rank r received so far.
func (c *Clock) Messages(r int) int { return c.msgs[r] }
