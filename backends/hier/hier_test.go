package hier

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
	"github.com/hvdorg/hvd/backends/tcp"
)

var prefixSeq atomic.Int64

// tcpDialer returns rank's Dial: a TCP sub-communicator named after name.
func tcpDialer(st backends.Store, prefix string, rank, n int) func(context.Context, string, []int) (backends.Communicator, error) {
	return func(ctx context.Context, name string, members []int) (backends.Communicator, error) {
		idx := -1
		for i, m := range members {
			if m == rank {
				idx = i
			}
		}
		return tcp.New(ctx, tcp.Config{Store: st, Prefix: prefix + "/" + name, Rank: idx, Size: len(members),
			ConnectTimeout: 10 * time.Second, Spin: 0, LocalSize: n})
	}
}

// build makes one hierarchical communicator per rank of hosts, in this
// process, over loopback TCP (the sub-communicators and Flat).
func build(t testing.TB, hosts [][]int, tweak func(*Config)) []*Comm {
	t.Helper()
	n := 0
	for _, g := range hosts {
		n += len(g)
	}
	st := backends.NewMemStore()
	prefix := fmt.Sprintf("hier%d", prefixSeq.Add(1))
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flat, err := tcp.New(context.Background(), tcp.Config{Store: st, Prefix: prefix + "/flat", Rank: r, Size: n,
				ConnectTimeout: 10 * time.Second, Spin: 0, LocalSize: n})
			if err != nil {
				errs[r] = err
				return
			}
			cfg := Config{Rank: r, Size: n, Hosts: hosts, Dial: tcpDialer(st, prefix, r, n), Flat: flat,
				HierAllreduce: true, HierAllgather: true}
			if tweak != nil {
				tweak(&cfg)
			}
			if comms[r], errs[r] = New(context.Background(), cfg); errs[r] != nil {
				flat.Close()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func asComms(cs []*Comm) []backends.Communicator {
	out := make([]backends.Communicator, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// runAll runs f on every rank concurrently and returns the errors; it fails
// the test if they do not all return within limit.
func runAll(t *testing.T, comms []*Comm, limit time.Duration, f func(c *Comm) error) []error {
	t.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(c) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("ranks did not return within %v (hang)", limit)
	}
	return errs
}

var layouts = []struct {
	name  string
	hosts [][]int
}{
	{"homogeneous", [][]int{{0, 1}, {2, 3}}},
	{"interleaved", [][]int{{0, 2}, {1, 3}}},
	{"nonhomogeneous", [][]int{{0, 1, 2}, {3}}},
	{"onePerHost", [][]int{{0}, {1}, {2}}},
	{"singleHost", [][]int{{0, 1, 2}}},
	{"np5", [][]int{{0, 1, 4}, {2, 3}}},
	{"np6interleaved", [][]int{{0, 3}, {1, 4}, {2, 5}}},
}

// TestConformance runs the shared suite on every layout, with the
// hierarchical algorithms (split path forced for every size that can split,
// and never taken) and without them (everything through Flat).
func TestConformance(t *testing.T) {
	small := []int{0, 1, 7, 1001}
	few := []backends.DType{backends.Float32, backends.Int8, backends.Float16}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Run("hier/split", func(t *testing.T) {
				o := conformance.Options{Counts: small}
				if testing.Short() {
					// The race run: one dtype of each element size (what
					// changes how blocks split), a 16-bit float and two
					// ops; dtype and op change which reduction kernel runs,
					// not when buffers pass between goroutines, and the
					// normal run covers every dtype and op on every layout.
					o.DTypes = []backends.DType{backends.Uint8, backends.BFloat16, backends.Int32, backends.Float32, backends.Float64}
					o.Ops = []backends.ReduceOp{backends.Sum, backends.Min}
				}
				conformance.RunAll(t, asComms(build(t, l.hosts, func(c *Config) { c.SplitBytes = 1 })), o)
			})
			t.Run("hier/nosplit", func(t *testing.T) {
				o := conformance.Options{Counts: small, DTypes: few}
				conformance.RunAll(t, asComms(build(t, l.hosts, func(c *Config) { c.SplitBytes = 1 << 40 })), o)
			})
			t.Run("hier/large", func(t *testing.T) {
				// Default threshold: 70001 elements take the split path on
				// homogeneous layouts, with blocks of unequal size.
				if testing.Short() {
					t.Skip("large buffers are slow under -race")
				}
				o := conformance.Options{Counts: []int{70001}, DTypes: []backends.DType{backends.Float32, backends.BFloat16}, Ops: []backends.ReduceOp{backends.Sum, backends.Max}}
				conformance.RunAll(t, asComms(build(t, l.hosts, nil)), o)
			})
			t.Run("hier/default", func(t *testing.T) {
				// The suite's own matrix (up to 1 MiB + 3 elements) with the
				// default threshold, on one layout (it takes ~20 s).
				if testing.Short() || l.name != "homogeneous" {
					t.Skip("the full matrix runs on the homogeneous layout only, and not in -short")
				}
				conformance.RunAll(t, asComms(build(t, l.hosts, nil)), conformance.Options{})
			})
			t.Run("flat", func(t *testing.T) {
				o := conformance.Options{Counts: []int{0, 7, 1001}, DTypes: []backends.DType{backends.Float32}}
				conformance.RunAll(t, asComms(build(t, l.hosts, func(c *Config) { c.HierAllreduce, c.HierAllgather = false, false })), o)
			})
		})
	}
}

// One flag without the other dials a different set of sub-communicators.
func TestConformanceOneFlag(t *testing.T) {
	o := conformance.Options{Counts: []int{0, 7, 1001}, DTypes: []backends.DType{backends.Float32, backends.Uint8}}
	for _, l := range layouts[:3] {
		t.Run(l.name+"/allreduceOnly", func(t *testing.T) {
			conformance.RunAll(t, asComms(build(t, l.hosts, func(c *Config) { c.HierAllgather, c.SplitBytes = false, 1 })), o)
		})
		t.Run(l.name+"/allgatherOnly", func(t *testing.T) {
			conformance.RunAll(t, asComms(build(t, l.hosts, func(c *Config) { c.HierAllreduce = false })), o)
		})
	}
}

// The sub-communicators each rank builds.
func TestSubCommunicators(t *testing.T) {
	names := func(c *Comm) string {
		var out []string
		for _, s := range []*sub{c.local, c.leaders, c.cross} {
			if s == nil {
				out = append(out, "-")
			} else {
				out = append(out, fmt.Sprintf("%s%v", s.name, s.members))
			}
		}
		return strings.Join(out, " ")
	}
	comms := build(t, [][]int{{0, 3}, {1, 2}}, nil)
	want := []string{
		"local-h0[0 3] leaders[0 1] leaders[0 1]",
		"local-h1[1 2] leaders[0 1] leaders[0 1]",
		"local-h1[1 2] - cross-l1[2 3]",
		"local-h0[0 3] - cross-l1[2 3]",
	}
	for r, c := range comms {
		if got := names(c); got != want[r] {
			t.Errorf("rank %d: %s, want %s", r, got, want[r])
		}
	}
	comms = build(t, [][]int{{0, 1, 2}, {3}}, func(c *Config) { c.HierAllreduce = false })
	want = []string{
		"local-h0[0 1 2] leaders[0 3] leaders[0 3]",
		"local-h0[0 1 2] - -",
		"local-h0[0 1 2] - -",
		"- leaders[0 3] leaders[0 3]",
	}
	for r, c := range comms {
		if got := names(c); got != want[r] {
			t.Errorf("non-homogeneous rank %d: %s, want %s", r, got, want[r])
		}
	}
}

func TestInvalidConfig(t *testing.T) {
	flat := build(t, [][]int{{0, 1}}, func(c *Config) { c.HierAllreduce, c.HierAllgather = false, false })[0].flat
	cases := map[string][][]int{
		"missing rank":  {{0}},
		"duplicate":     {{0, 0}},
		"not ascending": {{1, 0}},
		"hosts order":   {{1}, {0}},
		"out of range":  {{0, 2}},
		"empty host":    {{0, 1}, {}},
		"no hosts":      nil,
		"negative rank": {{-1, 0}},
	}
	for name, hosts := range cases {
		_, err := New(context.Background(), Config{Rank: 0, Size: 2, Hosts: hosts, Flat: flat, HierAllreduce: true})
		if !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	for name, cfg := range map[string]Config{
		"no flat":        {Rank: 0, Size: 1, Hosts: [][]int{{0}}, HierAllreduce: true},
		"flat size":      {Rank: 0, Size: 3, Hosts: [][]int{{0, 1, 2}}, Flat: flat, HierAllreduce: true},
		"no dial":        {Rank: 0, Size: 2, Hosts: [][]int{{0}, {1}}, Flat: flat, HierAllreduce: true},
		"global ranks":   {Rank: 0, Size: 2, Hosts: [][]int{{0}, {1}}, Flat: flat, GlobalRanks: []int{1}},
		"rank too large": {Rank: 2, Size: 2, Hosts: [][]int{{0}, {1}}, Flat: flat},
	} {
		if _, err := New(context.Background(), cfg); !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	c := build(t, [][]int{{0}, {1}}, nil)[0]
	cases := map[string]error{
		"odd bytes":  c.Allreduce(make([]byte, 3), backends.Float32, backends.Sum),
		"bad dtype":  c.Allreduce(nil, backends.DType(99), backends.Sum),
		"bad root":   c.Broadcast(nil, 5),
		"counts len": c.Allgatherv(nil, nil, []int{0}),
		"send len":   c.Allgatherv(make([]byte, 2), make([]byte, 2), []int{1, 1}),
	}
	for name, err := range cases {
		if !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	// Argument errors do not break the communicator.
	if c.broken != nil {
		t.Fatalf("broken by an argument error: %v", c.broken)
	}
}

// A rank that closes its communicator (every sub-communicator and Flat)
// while the others run a large allreduce: every survivor fails with a peer
// failure naming a rank of this communicator, nobody hangs, and later calls
// fail too.
func TestPeerDeathDuringAllreduce(t *testing.T) {
	for _, l := range layouts {
		if len(l.hosts) == 1 {
			continue // no hierarchy
		}
		t.Run(l.name, func(t *testing.T) {
			comms := build(t, l.hosts, nil)
			n := len(comms)
			victim := n - 1
			errs := runAll(t, comms, 20*time.Second, func(c *Comm) error {
				if c.Rank() == victim {
					time.Sleep(20 * time.Millisecond)
					return c.Close()
				}
				return c.Allreduce(make([]byte, 8<<20), backends.Float32, backends.Sum)
			})
			for r, err := range errs[:victim] {
				checkPeerFailure(t, r, n, err)
				if err2 := comms[r].Barrier(); !errors.Is(err2, backends.ErrPeerFailure) {
					t.Errorf("rank %d: later call: %v", r, err2)
				}
			}
		})
	}
}

func checkPeerFailure(t *testing.T, r, n int, err error) {
	t.Helper()
	var pe *backends.PeerError
	if !errors.Is(err, backends.ErrPeerFailure) || !errors.As(err, &pe) {
		t.Errorf("rank %d: want a PeerError, got %v", r, err)
		return
	}
	if pe.Peer < 0 || pe.Peer >= n || pe.Peer == r {
		t.Errorf("rank %d: error names peer %d: %v", r, pe.Peer, err)
	}
}

// Peers named by a sub-communicator are translated to this communicator's
// ranks: on hosts [[0,2],[1,3]], rank 1's only peer in its first step is
// rank 3 (sub-rank 1 of local-h1).
func TestPeerTranslated(t *testing.T) {
	comms := build(t, [][]int{{0, 2}, {1, 3}}, func(c *Config) { c.GlobalRanks = []int{10, 11, 12, 13} })
	comms[3].Close()
	errs := runAll(t, comms[:3], 20*time.Second, func(c *Comm) error {
		return c.Allgatherv(make([]byte, 4), make([]byte, 16), []int{4, 4, 4, 4})
	})
	var pe *backends.PeerError
	if !errors.As(errs[1], &pe) || pe.Peer != 3 || pe.Global != 13 {
		t.Fatalf("rank 1: want a PeerError naming rank 3 (global 13), got %v (%+v)", errs[1], pe)
	}
	t.Logf("rank 1: %v", errs[1])
	if !strings.Contains(errs[1].Error(), "local-h1") {
		t.Errorf("rank 1: error does not name the sub-communicator: %v", errs[1])
	}
	for r, err := range errs {
		checkPeerFailure(t, r, 4, err)
	}
}

// One sub-communicator of one rank dies in the middle of an operation (the
// others of that rank stay up): the failure still reaches every rank.
func TestSubCommunicatorDeath(t *testing.T) {
	for _, which := range []string{"local", "cross"} {
		t.Run(which, func(t *testing.T) {
			comms := build(t, [][]int{{0, 1}, {2, 3}}, nil)
			victim := comms[3]
			s := victim.local
			if which == "cross" {
				s = victim.cross
			}
			go func() { time.Sleep(20 * time.Millisecond); s.comm.Close() }()
			errs := runAll(t, comms, 20*time.Second, func(c *Comm) error {
				for i := 0; i < 1000; i++ {
					if err := c.Allreduce(make([]byte, 1<<20), backends.Float32, backends.Sum); err != nil {
						return err
					}
				}
				return errors.New("no error after 1000 allreduces")
			})
			for r, err := range errs[:3] {
				checkPeerFailure(t, r, 4, err)
			}
			if !errors.Is(errs[3], backends.ErrClosed) && !errors.Is(errs[3], backends.ErrPeerFailure) {
				t.Errorf("victim: %v", errs[3])
			}
		})
	}
}

// A dial that fails makes New fail on every rank, promptly.
func TestDialFailure(t *testing.T) {
	hosts := [][]int{{0, 1}, {2, 3}}
	st := backends.NewMemStore()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flat, err := tcp.New(context.Background(), tcp.Config{Store: st, Prefix: "df/flat", Rank: r, Size: 4, ConnectTimeout: 10 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			defer flat.Close()
			dial := tcpDialer(st, "df", r, 4)
			cfg := Config{Rank: r, Size: 4, Hosts: hosts, Flat: flat, HierAllreduce: true, HierAllgather: true,
				Dial: func(ctx context.Context, name string, members []int) (backends.Communicator, error) {
					if name == "leaders" && r == 2 {
						return nil, errors.New("no route to host")
					}
					ctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					return dial(ctx, name, members)
				}}
			c, err := New(context.Background(), cfg)
			if c != nil {
				c.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "no route to host") || !strings.Contains(errs[2].Error(), `"leaders"`) {
		t.Errorf("rank 2: %v", errs[2])
	}
	if errs[0] == nil {
		t.Errorf("rank 0 (the other leader) built its communicator")
	}
}

func TestCloseAndBroken(t *testing.T) {
	comms := build(t, [][]int{{0, 1}, {2}}, nil)
	comms[2].Close()
	if err := comms[2].Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if err := comms[2].Allreduce(make([]byte, 4), backends.Float32, backends.Sum); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("allreduce after close: %v", err)
	}
	if _, err := comms[2].Idle(0); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("idle after close: %v", err)
	}
	errs := runAll(t, comms[:2], 20*time.Second, func(c *Comm) error {
		return c.Broadcast(make([]byte, 64), 2)
	})
	for r, err := range errs {
		checkPeerFailure(t, r, 3, err)
		// Broken: every later call fails, whichever path it takes.
		if err := comms[r].Send(nil, 1-r, 0); !errors.Is(err, backends.ErrPeerFailure) {
			t.Errorf("rank %d: send after failure: %v", r, err)
		}
		if err := comms[r].Allgatherv(nil, nil, []int{0, 0, 0}); !errors.Is(err, backends.ErrPeerFailure) {
			t.Errorf("rank %d: allgather after failure: %v", r, err)
		}
	}
}

// Control messages and idling go through Flat.
func TestMessengerAndIdler(t *testing.T) {
	comms := build(t, [][]int{{0, 2}, {1}}, nil)
	errs := runAll(t, comms, 20*time.Second, func(c *Comm) error {
		all, err := c.GatherMsgs([]byte(fmt.Sprint("m", c.Rank())), 1)
		if err != nil {
			return err
		}
		if c.Rank() == 1 && fmt.Sprint(all) != "[[109 48] [109 49] [109 50]]" {
			return fmt.Errorf("gathered %q", all)
		}
		got, err := c.BcastMsg([]byte("resp"), 2)
		if err != nil {
			return err
		}
		if string(got) != "resp" {
			return fmt.Errorf("bcast got %q", got)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	go func() { time.Sleep(20 * time.Millisecond); comms[0].Kick() }()
	if in, err := comms[0].Idle(5 * time.Second); err != nil || in {
		t.Fatalf("kick: incoming=%v err=%v", in, err)
	}
	go func() { time.Sleep(20 * time.Millisecond); comms[1].Send([]byte{1}, 0, 3) }()
	if in, err := comms[0].Idle(5 * time.Second); err != nil || !in {
		t.Fatalf("incoming: incoming=%v err=%v", in, err)
	}
	if err := comms[0].Recv(make([]byte, 1), 1, 3); err != nil {
		t.Fatal(err)
	}
}

// A flat communicator without control messages: the composite says so.
func TestFlatWithoutMessenger(t *testing.T) {
	flat := build(t, [][]int{{0}}, func(c *Config) { c.HierAllreduce, c.HierAllgather = false, false })[0].flat
	c, err := New(context.Background(), Config{Rank: 0, Size: 1, Hosts: [][]int{{0}}, Flat: bare{flat}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GatherMsgs(nil, 0); !errors.Is(err, backends.ErrUnsupported) {
		t.Errorf("gather: %v", err)
	}
	if _, err := c.Idle(0); !errors.Is(err, backends.ErrUnsupported) {
		t.Errorf("idle: %v", err)
	}
	c.Kick() // no-op, no panic
}

// bare hides the Messenger and Idler methods of a communicator.
type bare struct{ backends.Communicator }

func BenchmarkAllreduce(b *testing.B) {
	for _, size := range []int{8, 64 << 10, 4 << 20} {
		for _, hier := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/hier=%v", size, hier), func(b *testing.B) {
				comms := build(b, [][]int{{0, 1}, {2, 3}}, func(c *Config) { c.HierAllreduce = hier })
				b.SetBytes(int64(size))
				b.ResetTimer()
				var wg sync.WaitGroup
				for _, c := range comms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]byte, size)
						for i := 0; i < b.N; i++ {
							if err := c.Allreduce(buf, backends.Float32, backends.Sum); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// recorder logs the collectives called on a sub-communicator.
type recorder struct {
	backends.Communicator
	name string
	log  *[]string // one rank's: only its goroutine appends
}

func (r *recorder) add(s string) { *r.log = append(*r.log, r.name+"."+s) }

func (r *recorder) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	r.add(fmt.Sprint("allreduce/", len(buf)))
	return r.Communicator.Allreduce(buf, dt, op)
}

func (r *recorder) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	r.add(fmt.Sprint("reducescatter", counts))
	return r.Communicator.ReduceScatter(send, recv, counts, dt, op)
}

func (r *recorder) Allgatherv(send, recv []byte, counts []int) error {
	r.add(fmt.Sprint("allgatherv", counts))
	return r.Communicator.Allgatherv(send, recv, counts)
}

func (r *recorder) Broadcast(buf []byte, root int) error {
	r.add(fmt.Sprint("broadcast/", root))
	return r.Communicator.Broadcast(buf, root)
}

// The algorithm each layout and size takes, step by step.
func TestAlgorithmSteps(t *testing.T) {
	type call func(c *Comm) error
	ar := func(n int) call {
		return func(c *Comm) error { return c.Allreduce(make([]byte, n), backends.Float32, backends.Sum) }
	}
	ag := func(c *Comm) error {
		counts := []int{4, 8, 12, 16}
		return c.Allgatherv(make([]byte, counts[c.Rank()]), make([]byte, 40), counts)
	}
	bc := func(root int) call { return func(c *Comm) error { return c.Broadcast(make([]byte, 8), root) } }
	homog, inter, nonh := [][]int{{0, 1}, {2, 3}}, [][]int{{0, 2}, {1, 3}}, [][]int{{0, 1, 2}, {3}}
	cases := []struct {
		name  string
		hosts [][]int
		f     call
		want  []string // per rank
	}{
		{"split", homog, ar(1 << 20), []string{
			"local-h0.reducescatter[131072 131072] leaders.allreduce/524288 local-h0.allgatherv[524288 524288]",
			"local-h0.reducescatter[131072 131072] cross-l1.allreduce/524288 local-h0.allgatherv[524288 524288]",
			"local-h1.reducescatter[131072 131072] leaders.allreduce/524288 local-h1.allgatherv[524288 524288]",
			"local-h1.reducescatter[131072 131072] cross-l1.allreduce/524288 local-h1.allgatherv[524288 524288]",
		}},
		{"small", homog, ar(16), []string{
			"local-h0.reducescatter[4 0] leaders.allreduce/16 local-h0.broadcast/0",
			"local-h0.reducescatter[4 0] local-h0.broadcast/0",
			"local-h1.reducescatter[4 0] leaders.allreduce/16 local-h1.broadcast/0",
			"local-h1.reducescatter[4 0] local-h1.broadcast/0",
		}},
		{"nonhomogeneous", nonh, ar(1 << 20), []string{
			"local-h0.reducescatter[262144 0 0] leaders.allreduce/1048576 local-h0.broadcast/0",
			"local-h0.reducescatter[262144 0 0] local-h0.broadcast/0",
			"local-h0.reducescatter[262144 0 0] local-h0.broadcast/0",
			"leaders.allreduce/1048576",
		}},
		{"allgather", inter, ag, []string{
			"local-h0.allgatherv[4 12] leaders.allgatherv[16 24] local-h0.broadcast/0",
			"local-h1.allgatherv[8 16] leaders.allgatherv[16 24] local-h1.broadcast/0",
			"local-h0.allgatherv[4 12] local-h0.broadcast/0",
			"local-h1.allgatherv[8 16] local-h1.broadcast/0",
		}},
		{"broadcastFromNonLeader", homog, bc(3), []string{
			"leaders.broadcast/1 local-h0.broadcast/0",
			"local-h0.broadcast/0",
			"local-h1.broadcast/1 leaders.broadcast/1",
			"local-h1.broadcast/1",
		}},
		{"broadcastFromLeader", nonh, bc(3), []string{
			"leaders.broadcast/1 local-h0.broadcast/0",
			"local-h0.broadcast/0",
			"local-h0.broadcast/0",
			"leaders.broadcast/1",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := make([][]string, 4)
			comms := build(t, tc.hosts, func(c *Config) {
				dial, r := c.Dial, c.Rank
				c.Dial = func(ctx context.Context, name string, members []int) (backends.Communicator, error) {
					m, err := dial(ctx, name, members)
					if err != nil {
						return nil, err
					}
					return &recorder{m, name, &logs[r]}, nil
				}
			})
			for r, err := range runAll(t, comms, 20*time.Second, tc.f) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r := range comms {
				if got := strings.Join(logs[r], " "); got != tc.want[r] {
					t.Errorf("rank %d:\n got %s\nwant %s", r, got, tc.want[r])
				}
			}
		})
	}
}

// Hosts that disagree on the buffer size take different paths; the
// sub-communicators see the mismatch and everyone fails instead of hanging.
func TestMismatchedSizes(t *testing.T) {
	comms := build(t, [][]int{{0, 1}, {2, 3}}, nil)
	errs := runAll(t, comms, 20*time.Second, func(c *Comm) error {
		n := 1 << 20
		if c.Rank() >= 2 {
			n = 16
		}
		return c.Allreduce(make([]byte, n), backends.Float32, backends.Sum)
	})
	for r, err := range errs {
		checkPeerFailure(t, r, 4, err)
	}
	t.Logf("rank 0: %v", errs[0])
}

// SetHierarchical switches allreduce and allgather between the two
// algorithms while the communicator runs (the autotuner's handle): the
// steps taken follow the switch, results stay right, and a part built
// flat cannot be switched on.
func TestSetHierarchical(t *testing.T) {
	homog := [][]int{{0, 1}, {2, 3}}
	logs := make([][]string, 4)
	comms := build(t, homog, func(c *Config) {
		dial, r := c.Dial, c.Rank
		c.HierAllgather = false
		c.Dial = func(ctx context.Context, name string, members []int) (backends.Communicator, error) {
			m, err := dial(ctx, name, members)
			if err != nil {
				return nil, err
			}
			return &recorder{m, name, &logs[r]}, nil
		}
	})
	if ar, ag := comms[0].HierarchicalChoices(); !ar || ag {
		t.Fatalf("choices %v %v, want allreduce only", ar, ag)
	}
	step := func(ar, ag bool) {
		t.Helper()
		for r := range logs {
			logs[r] = nil
		}
		errs := runAll(t, comms, 20*time.Second, func(c *Comm) error {
			c.SetHierarchical(ar, ag)
			if gar, gag := c.HierarchicalState(); gar != ar || gag {
				return fmt.Errorf("state %v %v after SetHierarchical(%v, %v)", gar, gag, ar, ag)
			}
			buf := make([]byte, 64)
			for i := range 16 {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(c.Rank()+i)))
			}
			if err := c.Allreduce(buf, backends.Float32, backends.Sum); err != nil {
				return err
			}
			for i := range 16 {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])); got != float32(6+4*i) {
					return fmt.Errorf("element %d: %v", i, got)
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	step(true, false)
	if len(logs[0]) == 0 {
		t.Fatal("hierarchical allreduce used no sub-communicator")
	}
	step(false, true) // allgather was built flat: stays flat
	for r, l := range logs {
		if len(l) != 0 {
			t.Fatalf("rank %d: flat allreduce used sub-communicators: %v", r, l)
		}
	}
	step(true, false)
	if len(logs[0]) == 0 {
		t.Fatal("switching back did not take the hierarchical path")
	}
}
