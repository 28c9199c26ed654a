package sim

import (
	"context"
	"testing"
	"time"
)

func TestClockChargesAMessage(t *testing.T) {
	m := DefaultModel()
	c := NewClock(m, 16)
	// Same host over loopback: sender CPU + bytes, latency, receiver CPU.
	got := c.Send(0, 1, 5000, 10*time.Microsecond, m.Loopback)
	want := 10*time.Microsecond + 2*m.Loopback.CPU + time.Microsecond + m.Loopback.Latency
	if got != want {
		t.Fatalf("loopback message arrives at %v, want %v", got, want)
	}
	// Across hosts the NIC is shared: a second rank's message waits for the first's bytes.
	a := c.Send(2, 8, 12_500_000, 0, m.Loopback) // 1 ms at 12.5 GB/s
	b := c.Send(3, 9, 12_500_000, 0, m.Loopback)
	if b-a < time.Millisecond-time.Microsecond {
		t.Fatalf("two 1 ms messages through one NIC arrive %v apart", b-a)
	}
	if in, out := c.Bytes(1); in != 5000 || out != 0 || c.Messages(1) != 1 {
		t.Fatalf("rank 1: in %d out %d msgs %d", in, out, c.Messages(1))
	}
}

// The short form of make simulate: two sizes, and what the tables must show.
func TestRunShort(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sizes = []int{16, 64}
	cfg.Tensors, cfg.Repeat, cfg.KeyByKeyMax = 20, 1, 64
	rows, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.CachedFlat.Negotiated || r.CachedHier.Negotiated || r.CachedTree.Negotiated || !r.NewFlat.Negotiated || !r.NewHier.Negotiated || !r.NewTree.Negotiated {
			t.Fatalf("N=%d: cached rounds negotiated or new ones did not: %+v", r.N, r)
		}
		// Flat: rank 0 hears from everyone; hier: from its host and log2(hosts) leaders.
		if r.CachedFlat.Rank0Msgs != r.N-1 {
			t.Errorf("N=%d: flat cached round: rank 0 got %d messages, want %d", r.N, r.CachedFlat.Rank0Msgs, r.N-1)
		}
		if want := log2ceil(r.N); r.CachedTree.Rank0Msgs != want { // N a power of two here
			t.Errorf("N=%d: tree cached round: rank 0 got %d messages, want %d", r.N, r.CachedTree.Rank0Msgs, want)
		}
		if want := cfg.Model.HostSize - 1 + log2ceil(r.Hosts); r.CachedHier.Rank0Msgs != want {
			t.Errorf("N=%d: hier cached round: rank 0 got %d messages, want %d", r.N, r.CachedHier.Rank0Msgs, want)
		}
		// Key by key every rank reads every host key; with range reads a
		// rank makes 3 writes and 3 reads, plus the long polls of the reads
		// that waited.
		if int(r.KeyByKey.Requests) < r.N*(r.N-1) || int(r.Ranged.Requests) > 12*r.N {
			t.Errorf("N=%d: range reads took %d requests, key by key %d", r.N, r.Ranged.Requests, r.KeyByKey.Requests)
		}
		if r.Allreduce.Predicted < r.Allreduce.Bound || r.Allreduce.Bound <= 0 {
			t.Errorf("N=%d: allreduce predicted %v under its bound %v", r.N, r.Allreduce.Predicted, r.Allreduce.Bound)
		}
		if r.ElasticAf.Total <= 0 || r.ElasticAf.Survivor != r.N-8 {
			t.Errorf("N=%d: elastic %+v", r.N, r.ElasticAf)
		}
	}
	if r := rows[1]; r.CachedHier.Time >= r.CachedFlat.Time || r.CachedTree.Time >= r.CachedFlat.Time {
		t.Errorf("N=64: cached rounds hier %v and tree %v not both below the flat one %v", r.CachedHier.Time, r.CachedTree.Time, r.CachedFlat.Time)
	}
}

// The connections come from backends/tcp's rule: at 16 ranks (2 hosts)
// every communicator is a full mesh as before; at 1,024 the engine's flat
// communicator holds its 10 recursive-doubling partners and 1 ring
// neighbour (the other is a partner), the cross-host one (128 hosts) 7 and
// 1, the point-to-point ones nothing before use.
func TestConnections(t *testing.T) {
	m := DefaultModel()
	for _, c := range []struct{ n, before, after, goal int }{
		{16, 2*15 + 2*1, 2*15 + 2*1, 8 + 7},
		{1024, 2*1023 + 2*127, 10 + 1 + 7 + 1, 20 + 7},
	} {
		got := CountConnections(m, c.n)
		if got.Before != c.before || got.After != c.after || got.Goal != c.goal {
			t.Errorf("N=%d: %+v, want before %d, after %d, goal %d", c.n, got, c.before, c.after, c.goal)
		}
	}
}

func TestModelValidate(t *testing.T) {
	m := DefaultModel()
	m.Net.Bandwidth = 0
	if m.Validate() == nil {
		t.Fatal("a zero bandwidth was accepted")
	}
	if _, err := NewSet(DefaultModel(), 0, Flat, -1, -1); err == nil {
		t.Fatal("a set of 0 members was made")
	}
}

// The tree and the leaders with a number of members that is not a power
// of two (and hosts that are not): a step negotiates, the next runs from
// the cache (the members agreeing, which Set checks every round).
func TestTreeOddSize(t *testing.T) {
	for _, ctl := range []Control{Tree, Hier} {
		s, err := NewSet(DefaultModel(), 24, ctl, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		for step := range 2 {
			rs, err := s.Step(Gradients("g", 10))
			if err != nil {
				t.Fatalf("%v step %d: %v", ctl, step, err)
			}
			if last := rs[len(rs)-1]; last.Executed == 0 || (step == 1 && last.Negotiated) {
				t.Fatalf("%v step %d: %+v", ctl, step, rs)
			}
		}
	}
}
