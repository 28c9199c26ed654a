package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// Config is what Run simulates.
type Config struct {
	Model   Model
	Sizes   []int // ranks; hosts of Model.HostSize
	Tensors int   // allreduces per training step (100)
	Repeat  int   // steps measured per kind of round; the median is reported (3)
	// KeyByKeyMax is the largest size whose key-by-key world formation is
	// measured on the store; above it the time is estimated from the
	// largest measured one's request rate and the exact request count.
	KeyByKeyMax int
	Bytes       int64 // the large allreduce (64 MiB)
	// Progress, when set, is told what runs (the 1,024 runs take a while).
	Progress func(format string, args ...any)
}

// DefaultConfig: N = 16, 64, 256, 1,024 on hosts of 8, 100 gradients a
// step, the 64 MiB allreduce, key-by-key formation measured up to 256.
func DefaultConfig() Config {
	return Config{Model: DefaultModel(), Sizes: []int{16, 64, 256, 1024}, Tensors: 100, Repeat: 3, KeyByKeyMax: 256, Bytes: 64 << 20}
}

// Row is one size's results, before (today's code) and after.
type Row struct {
	N, Hosts                 int
	CachedFlat, CachedHier   Round
	NewFlat, NewHier         Round
	CachedTree, NewTree      Round // what sets of 64 or more do since issue 31
	Conns                    Connections
	KeyByKey, Ranged         Formation
	KeyByKeyEstimated        bool
	ElasticBefore, ElasticAf Recovery
	Allreduce                Allreduce
	Small                    time.Duration // an 8 B allreduce's execution (PredictSmallAllreduce)
}

// Run simulates every size of cfg.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	var err error
	if err = cfg.Model.Validate(); err != nil {
		return nil, err
	}
	say := cfg.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	secret := []byte("hvdsim")
	// Two stores: today's (key by key, the fixed bound on connections not
	// yet authenticated) and the changed one (range reads, and the plan
	// declared as hvdrun does, which raises that bound).
	var srvs [2]*rendezvous.Server
	for i := range srvs {
		if srvs[i], err = rendezvous.NewServer(rendezvous.ServerConfig{Addr: "127.0.0.1:0", Secret: secret}); err != nil {
			return nil, err
		}
		defer srvs[i].Close()
	}
	epoch := 0
	form := func(n int, batched bool) (Formation, error) {
		epoch++
		srv := srvs[0]
		if batched {
			srv = srvs[1]
			srv.Init(map[string]int{rendezvous.EpochScope("hvd", epoch): n})
		}
		return FormWorld(ctx, srv, secret, n, cfg.Model.HostSize, epoch, batched)
	}
	var rows []Row
	var rate float64 // key-by-key requests per second, at the largest measured size
	for _, n := range cfg.Sizes {
		row := Row{N: n, Hosts: cfg.Model.Hosts(n)}
		say("N=%d: negotiation", n)
		for _, ctl := range []Control{Flat, Tree, Hier} {
			cached, fresh, err := negotiation(cfg, n, ctl)
			if err != nil {
				return nil, err
			}
			switch ctl {
			case Flat:
				row.CachedFlat, row.NewFlat = cached, fresh
			case Tree:
				row.CachedTree, row.NewTree = cached, fresh
			default:
				row.CachedHier, row.NewHier = cached, fresh
			}
		}
		row.Conns = CountConnections(cfg.Model, n)
		row.Allreduce = PredictAllreduce(cfg.Model, n, cfg.Bytes)
		row.Small = PredictSmallAllreduce(cfg.Model, n, 8)
		survivors := n - min(cfg.Model.HostSize, n)
		say("N=%d: store, range reads", n)
		// The median of Repeat formations: wall time on a shared machine
		// varies run to run.
		median := func(n int) (Formation, error) {
			var fs []Formation
			for range max(cfg.Repeat, 1) {
				f, err := form(n, true)
				if err != nil {
					return Formation{}, err
				}
				fs = append(fs, f)
			}
			slices.SortFunc(fs, func(a, b Formation) int { return int(a.Time - b.Time) })
			return fs[len(fs)/2], nil
		}
		if row.Ranged, err = median(n); err != nil {
			return nil, err
		}
		after, err := median(max(survivors, 1))
		if err != nil {
			return nil, err
		}
		keyByKey := func(n int) (Formation, bool, error) {
			if n <= cfg.KeyByKeyMax || rate == 0 {
				f, err := form(n, false)
				if err == nil {
					rate = float64(f.Requests) / f.Time.Seconds()
				}
				return f, false, err
			}
			f := Formation{Ranks: n, Requests: keyByKeyRequests(n)}
			f.Time = time.Duration(float64(f.Requests) / rate * 1e9)
			return f, true, nil
		}
		say("N=%d: store, key by key", n)
		var before Formation
		if before, _, err = keyByKey(max(survivors, 1)); err != nil {
			return nil, err
		}
		if row.KeyByKey, row.KeyByKeyEstimated, err = keyByKey(n); err != nil {
			return nil, err
		}
		conns := CountConnections(cfg.Model, survivors)
		row.ElasticBefore = ElasticRecovery(cfg.Model, n, before.Time, conns.Before, row.NewFlat.Time)
		row.ElasticAf = ElasticRecovery(cfg.Model, n, after.Time, conns.After, row.NewTree.Time)
		rows = append(rows, row)
	}
	return rows, nil
}

// keyByKeyRequests is what FormWorld asks of a store without range reads
// when nobody waits: n host keys written and n(n−1) read, and per mesh n
// addresses written and n(n−1)/2 read.
func keyByKeyRequests(n int) int64 {
	N := int64(n)
	return N + N*(N-1) + 2*(N+N*(N-1)/2)
}

// negotiation runs one step of new names (first round) and steps of the
// same names (cached), Repeat times each, and returns the medians.
func negotiation(cfg Config, n int, ctl Control) (cached, fresh Round, err error) {
	s, err := NewSet(cfg.Model, n, ctl, -1, -1)
	if err != nil {
		return Round{}, Round{}, err
	}
	reps := max(cfg.Repeat, 1)
	// A step of other names first: the first calls of a code path are
	// slower (cold caches, maps growing) and are not what a step costs.
	for range 2 {
		if _, err := s.Step(Gradients("warm", cfg.Tensors)); err != nil {
			return Round{}, Round{}, err
		}
	}
	var news, hits []Round
	for i := range reps {
		prefix := fmt.Sprintf("step%d", i)
		rs, err := s.Step(Gradients(prefix, cfg.Tensors))
		if err != nil {
			return Round{}, Round{}, err
		}
		news = append(news, rs[0])
		for range 2 {
			rs, err := s.Step(Gradients(prefix, cfg.Tensors))
			if err != nil {
				return Round{}, Round{}, err
			}
			if len(rs) != 1 || rs[0].Negotiated {
				return Round{}, Round{}, fmt.Errorf("hvd: sim: N=%d %v: a repeated step was not served by the cache (%d rounds)", n, ctl, len(rs))
			}
			hits = append(hits, rs[0])
		}
	}
	return medianRound(hits), medianRound(news), nil
}

func medianRound(rs []Round) Round {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Round) int { return int(a.Time - b.Time) })
	return rs[len(rs)/2]
}

// Write prints rows as the markdown tables of docs/performance.md.
func Write(w io.Writer, cfg Config, rows []Row) {
	us := func(d time.Duration) string {
		switch {
		case d >= 10*time.Second:
			return fmt.Sprintf("%.0f s", d.Seconds())
		case d >= time.Second:
			return fmt.Sprintf("%.2f s", d.Seconds())
		case d >= 10*time.Millisecond:
			return fmt.Sprintf("%.0f ms", float64(d)/1e6)
		case d >= time.Millisecond:
			return fmt.Sprintf("%.1f ms", float64(d)/1e6)
		}
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
	kb := func(b int64) string {
		if b >= 1<<20 {
			return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
		}
		return fmt.Sprintf("%.1f KB", float64(b)/1024)
	}
	m := cfg.Model
	fmt.Fprintf(w, "model: hosts of %d; net %v + %v CPU/msg, %.1f GB/s NIC; shm %v + %v, %.0f GB/s; loopback TCP %v + %v, %.0f GB/s; %d allreduces a step\n\n",
		m.HostSize, m.Net.Latency, m.Net.CPU, m.Net.Bandwidth/1e9, m.Shm.Latency, m.Shm.CPU, m.Shm.Bandwidth/1e9,
		m.Loopback.Latency, m.Loopback.CPU, m.Loopback.Bandwidth/1e9, cfg.Tensors)
	section(w, "Negotiation per round (flat = before; tree = sets of 64+ now; hier = host leaders, simulated only):",
		"N", "hosts", "cached round flat / tree / hier", "new-op round flat / tree / hier",
		"rank 0 bytes cached flat / tree / hier", "rank 0 bytes new flat / tree / hier", "rank 0 msgs cached flat / tree / hier", "8 B allreduce (execution)")
	three := func(f func(Round) string, r Row) string {
		return f(r.CachedFlat) + " / " + f(r.CachedTree) + " / " + f(r.CachedHier)
	}
	threeNew := func(f func(Round) string, r Row) string {
		return f(r.NewFlat) + " / " + f(r.NewTree) + " / " + f(r.NewHier)
	}
	tm := func(x Round) string { return us(x.Time) }
	by := func(x Round) string { return kb(x.Rank0Bytes) }
	ms := func(x Round) string { return fmt.Sprint(x.Rank0Msgs) }
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", r.N, r.Hosts,
			three(tm, r), threeNew(tm, r), three(by, r), threeNew(by, r), three(ms, r), us(r.Small))
	}
	section(w, "\nConnections, store, elastic recovery, 64 MiB allreduce:",
		"N", "TCP conns/rank before", "now", "goal", "store key by key: requests, time", "store range reads: requests, time (CPU)",
		"elastic kill → next step before", "after", "64 MiB allreduce predicted", "NIC bound", "ratio")
	for _, r := range rows {
		est := ""
		if r.KeyByKeyEstimated {
			est = " (est.)"
		}
		ratio := "-"
		if r.Allreduce.Bound > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.Allreduce.Predicted)/float64(r.Allreduce.Bound))
		}
		ev := func(f Formation) string {
			if f.Evicted > 0 {
				return fmt.Sprintf(" (%d evicted)", f.Evicted)
			}
			return ""
		}
		fmt.Fprintf(w, "| %d | %d | %d | %d | %d, %s%s%s | %d, %s (%s)%s | %s | %s | %s | %s | %s |\n", r.N,
			r.Conns.Before, r.Conns.After, r.Conns.Goal,
			r.KeyByKey.Requests, us(r.KeyByKey.Time), est, ev(r.KeyByKey), r.Ranged.Requests, us(r.Ranged.Time), us(r.Ranged.CPU), ev(r.Ranged),
			us(r.ElasticBefore.Total), us(r.ElasticAf.Total),
			us(r.Allreduce.Predicted), us(r.Allreduce.Bound), ratio)
	}
	section(w, "\nElastic recovery, parts (before → after):", "N", "detect", "driver", "notify", "store", "connect", "first step", "total")
	for _, r := range rows {
		b, a := r.ElasticBefore, r.ElasticAf
		pair := func(x, y time.Duration) string {
			if x == y {
				return us(x)
			}
			return us(x) + " → " + us(y)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", r.N, pair(b.Detect, a.Detect), pair(b.Driver, a.Driver),
			pair(b.Notify, a.Notify), pair(b.Store, a.Store), pair(b.Connect, a.Connect), pair(b.Step, a.Step), pair(b.Total, a.Total))
	}
	if len(rows) > 1 {
		first, last := rows[0], rows[len(rows)-1]
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Goals at N=%d: cached round %.1fx N=%d's flat with the tree (hier: %.1fx; flat: %.1fx; goal <= 3x); conns/rank %d before, %d now (goal <= %d); world formation %s (goal <= 2 s); elastic recovery %s (goal <= 1 s)\n",
			last.N, ratioOf(last.CachedTree.Time, first.CachedFlat.Time), first.N, ratioOf(last.CachedHier.Time, first.CachedFlat.Time), ratioOf(last.CachedFlat.Time, first.CachedFlat.Time),
			last.Conns.Before, last.Conns.After, last.Conns.Goal, us(last.Ranged.Time), us(last.ElasticAf.Total))
	}
}

// section prints a title and a markdown table's header.
func section(w io.Writer, title string, cols ...string) {
	fmt.Fprintf(w, "%s\n\n| %s |\n|%s\n", title, strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
}

func ratioOf(a, b time.Duration) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return float64(a) / float64(b)
}
