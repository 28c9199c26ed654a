package sim

import (
	"fmt"
	"math/bits"
	"runtime/debug"
	"slices"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// Control is how a set's negotiation messages travel.
type Control int

const (
	// Flat is the control plane of sets under 64 members (tcp, and hier's
	// flat mesh), and of every set before issue 31: every member sends its
	// status vector to every other member, its requests to set rank 0, and
	// set rank 0 sends the response list to each.
	Flat Control = iota
	// Hier aggregates through host leaders: members hand their status
	// vector to their host's leader over shared memory, the leader
	// combines them (engine.CombineStatus), the leaders combine theirs by
	// recursive doubling and hand the summary back; requests go to the
	// leader, which forwards its host's bundle to set rank 0; the response
	// list comes back down a binomial tree over the leaders, then over
	// shared memory. Simulated only: no backend offers it.
	Hier
	// Tree is what sets of 64 members or more do since issue 31
	// (engine/statusreduce.go): the status vectors combined by recursive
	// doubling over the flat TCP mesh (backends/tcp ReduceStatus), the
	// requests and the response list as Flat.
	Tree
)

func (c Control) String() string {
	switch c {
	case Hier:
		return "hier"
	case Tree:
		return "tree"
	}
	return "flat"
}

// flatMessages says whether requests and the response list go directly
// to and from set rank 0.
func (s *Set) flatMessages() bool { return s.ctl != Hier || s.m.Hosts(len(s.members)) == 1 }

// Round is what one negotiation round cost on the simulated clock.
type Round struct {
	Time       time.Duration // from the first status vector to the last member holding its execution list
	Negotiated bool          // the coordinator ran
	Rank0Bytes int64         // received plus sent by set rank 0
	Rank0Msgs  int           // messages set rank 0 received
	Rank0CPU   time.Duration // measured CPU of set rank 0's pure steps
	Executed   int           // responses in the execution list
}

// Set is one process set of n members negotiating on a model.
type Set struct {
	m       Model
	ctl     Control
	members []*engine.Member
	now     time.Time
}

// NewSet returns a set of n members (global ranks 0…n−1) with the
// engine's defaults for the response cache (1024) and the fusion threshold
// (128 MiB) unless cacheCap or fusion say otherwise (< 0: default).
func NewSet(m Model, n int, ctl Control, cacheCap int, fusion int64) (*Set, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("hvd: sim: a set of %d members", n)
	}
	if cacheCap < 0 {
		cacheCap = 1024
	}
	if fusion < 0 {
		fusion = 128 << 20
	}
	global := make([]int, n)
	for i := range global {
		global[i] = i
	}
	s := &Set{m: m, ctl: ctl, now: time.Unix(1e9, 0)}
	for r := range n {
		s.members = append(s.members, engine.NewMember(r, global, cacheCap, fusion))
	}
	return s, nil
}

// Gradients returns k allreduce requests named <prefix>.0 … <prefix>.k−1
// of mixed sizes (4 Ki to 4 Mi float32 elements), the shape of a training
// step.
func Gradients(prefix string, k int) []engine.Request {
	qs := make([]engine.Request, k)
	for i := range qs {
		qs[i] = engine.Request{Type: engine.Allreduce, Name: fmt.Sprintf("%s.%d", prefix, i), DType: backends.Float32,
			ReduceOp: 0, Postscale: 1, Prescale: 1, Shape: []int64{int64(4096) << (i % 11)}}
	}
	return qs
}

// Step enqueues reqs on every member and runs rounds until every member
// has executed them all; it returns each round.
func (s *Set) Step(reqs []engine.Request) ([]Round, error) {
	for _, mb := range s.members {
		for _, q := range reqs {
			if err := mb.Enqueue(q); err != nil {
				return nil, err
			}
		}
	}
	var rounds []Round
	for s.members[0].InFlight() > 0 {
		if len(rounds) == 8 {
			return rounds, fmt.Errorf("hvd: sim: %d requests still in flight after %d rounds", s.members[0].InFlight(), len(rounds))
		}
		r, err := s.round()
		if err != nil {
			return rounds, err
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

// timed runs f and returns its wall time (the driver runs one member's
// step at a time, so this is that member's CPU).
func timed(f func()) time.Duration {
	t := time.Now()
	f()
	return time.Since(t)
}

// eachMember runs step for every member and returns the median of their
// times: the members do the same work, and a median keeps one member's
// scheduling hiccup (this process shares its cores) out of every round.
func (s *Set) eachMember(step func(r int, mb *engine.Member)) time.Duration {
	ds := make([]time.Duration, len(s.members))
	for r, mb := range s.members {
		ds[r] = timed(func() { step(r, mb) })
	}
	return median(ds)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func (s *Set) round() (Round, error) {
	// No collection while the steps are timed; one before, at a boundary.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	n := len(s.members)
	c := NewClock(s.m, n)
	s.now = s.now.Add(time.Second)
	W := s.members[0].CacheWords()
	status := make([][]uint64, n)
	d := s.eachMember(func(r int, mb *engine.Member) {
		status[r] = append(mb.Status(), make([]uint64, engine.StatusExtraWords)...)
	})
	cpu0 := d
	t := make([]time.Duration, n) // when each member is ready for its next step
	for r := range t {
		t[r] = c.Work(r, 0, d)
	}
	neg := make([]bool, n)
	if s.ctl == Tree {
		all := make([]int, n)
		sums := make([][]uint64, n)
		for r := range all {
			all[r] = r
			sums[r] = status[r]
		}
		sum := doubling(c, all, sums, t, 8*len(status[0]), W, s.m.Loopback)
		d := s.eachMember(func(r int, mb *engine.Member) { neg[r] = mb.DecideSummary(sum) })
		for r := range t {
			t[r] = c.Work(r, t[r], d)
		}
		cpu0 += d
	} else if s.ctl == Flat || s.m.Hosts(n) == 1 {
		bytes := 8 * len(status[0])
		got := slices.Clone(t)
		for a := range n {
			for b := range n {
				if a != b {
					got[b] = max(got[b], c.Send(a, b, bytes, t[a], s.m.Loopback))
				}
			}
		}
		d := s.eachMember(func(r int, mb *engine.Member) { neg[r] = mb.Decide(status) })
		for r := range t {
			t[r] = c.Work(r, got[r], d)
		}
		cpu0 += d
	} else {
		sum, at := s.summarise(c, status, t, W)
		d := s.eachMember(func(r int, mb *engine.Member) { neg[r] = mb.DecideSummary(sum) })
		for r := range t {
			t[r] = c.Work(r, at[r], d)
		}
		cpu0 += d
	}
	for r := range neg {
		if neg[r] != neg[0] {
			return Round{}, fmt.Errorf("hvd: sim: members 0 and %d disagree on negotiating", r)
		}
	}
	var list []byte
	if neg[0] {
		msgs := make([][]byte, n)
		for r, mb := range s.members {
			msgs[r] = mb.Message()
		}
		at0 := s.gather(c, msgs, t)
		var err error
		d := timed(func() { list, err = s.members[0].Coordinate(msgs, s.now) })
		if err != nil {
			return Round{}, err
		}
		cpu0 += d
		t[0] = c.Work(0, at0, d)
		s.bcast(c, len(list), t)
	}
	execs := make([][]engine.Response, n)
	var failed error
	d = s.eachMember(func(r int, mb *engine.Member) {
		var err error
		if execs[r], err = mb.Complete(list); err != nil {
			failed = err
		}
	})
	if failed != nil {
		return Round{}, failed
	}
	cpu0 += d
	var end time.Duration
	for r := range t {
		end = max(end, c.Work(r, t[r], d))
	}
	in, out := c.Bytes(0)
	return Round{Time: end, Negotiated: neg[0], Rank0Bytes: in + out, Rank0Msgs: c.Messages(0), Rank0CPU: cpu0, Executed: len(execs[0])}, nil
}

// leaders returns the first rank of every host.
func (s *Set) leaders() []int {
	n := len(s.members)
	var ls []int
	for r := 0; r < n; r += s.m.HostSize {
		ls = append(ls, r)
	}
	return ls
}

// summarise is Hier's status exchange: members → leader (shm), leaders'
// recursive doubling over the network, leader → members. It returns the
// summary and when each member holds it.
func (s *Set) summarise(c *Clock, status [][]uint64, t []time.Duration, W int) ([]uint64, []time.Duration) {
	n := len(s.members)
	bytes := 8 * len(status[0])
	ls := s.leaders()
	H := len(ls)
	sums := make([][]uint64, H)
	at := make([]time.Duration, H)
	ds := make([]time.Duration, H)
	for h, l := range ls {
		at[h] = t[l]
		for r := l + 1; r < min(l+s.m.HostSize, n); r++ {
			at[h] = max(at[h], c.Send(r, l, bytes, t[r], s.m.Shm))
		}
		ds[h] = timed(func() {
			sums[h] = engine.NewStatusSummary(W, engine.StatusExtraWords)
			for r := l; r < min(l+s.m.HostSize, n); r++ {
				sums[h] = engine.CombineStatus(sums[h], status[r], W)
			}
		})
	}
	d := median(ds)
	for h, l := range ls {
		at[h] = c.Work(l, at[h], d)
	}
	sum := doubling(c, ls, sums, at, bytes, W, s.m.Net)
	out := make([]time.Duration, n)
	for h, l := range ls {
		out[l] = at[h]
		for r := l + 1; r < min(l+s.m.HostSize, n); r++ {
			out[r] = c.Send(l, r, bytes, at[h], s.m.Shm)
		}
	}
	return sum, out
}

// doubling is backends/tcp's ReduceStatus among parts (ranks, by set
// rank), each holding sums[i] from at[i]: with P the largest power of two
// ≤ len(parts), parts P… exchange with part i−P (the lower one sends its
// own back, which wakes an idle rank), the first P combine at distance 1,
// 2, 4 …, then hand the result to i+P. The lower group's summary is always
// combined first, as engine.CombineStatus needs for set rank 0's settings.
// It returns the combination; at[i] becomes when part i holds it.
func doubling(c *Clock, parts []int, sums [][]uint64, at []time.Duration, bytes, W int, link Link) []uint64 {
	H := len(parts)
	var d time.Duration // one combination's CPU: the median of a few
	{
		ds := make([]time.Duration, 15)
		for i := range ds {
			ds[i] = timed(func() {
				sum := engine.NewStatusSummary(W, engine.StatusExtraWords)
				sum = engine.CombineStatus(sum, sums[0], W)
				_ = engine.CombineStatus(sum, sums[H-1], W)
			})
		}
		d = median(ds)
	}
	combine := func(lo, hi int) {
		sum := engine.NewStatusSummary(W, engine.StatusExtraWords)
		sum = engine.CombineStatus(sum, sums[lo], W)
		sum = engine.CombineStatus(sum, sums[hi], W)
		sums[lo], sums[hi] = sum, slices.Clone(sum)
		at[lo] = c.Work(parts[lo], at[lo], d)
		at[hi] = c.Work(parts[hi], at[hi], d)
	}
	P := 1 << (bits.Len(uint(H)) - 1)
	for h := P; h < H; h++ { // fold the extra parts in
		lo := at[h-P]
		at[h-P] = max(at[h-P], c.Send(parts[h], parts[h-P], bytes, at[h], link))
		at[h] = max(at[h], c.Send(parts[h-P], parts[h], bytes, lo, link))
		combine(h-P, h)
	}
	for k := 1; k < P; k <<= 1 {
		next := slices.Clone(at[:P])
		for h := range P {
			next[h^k] = max(next[h^k], c.Send(parts[h], parts[h^k], bytes, at[h], link))
		}
		copy(at, next)
		for h := range P {
			if p := h ^ k; h < p {
				combine(h, p)
			}
		}
	}
	for h := P; h < H; h++ { // and hand them the result
		at[h] = max(at[h], c.Send(parts[h-P], parts[h], bytes, at[h-P], link))
		sums[h] = sums[h-P]
	}
	return sums[0]
}

// gather carries every member's message to set rank 0 and returns when it
// holds them all.
func (s *Set) gather(c *Clock, msgs [][]byte, t []time.Duration) time.Duration {
	n := len(s.members)
	at0 := t[0]
	if s.flatMessages() {
		for r := 1; r < n; r++ {
			at0 = max(at0, c.Send(r, 0, len(msgs[r]), t[r], s.m.Loopback))
		}
		return at0
	}
	for _, l := range s.leaders() {
		at, bundle := t[l], len(msgs[l])+4
		for r := l + 1; r < min(l+s.m.HostSize, n); r++ {
			at = max(at, c.Send(r, l, len(msgs[r]), t[r], s.m.Shm))
			bundle += len(msgs[r]) + 4
		}
		if l == 0 {
			at0 = max(at0, at)
			continue
		}
		at0 = max(at0, c.Send(l, 0, bundle, at, s.m.Net))
	}
	return at0
}

// bcast carries set rank 0's response list of bytes to every member; t[r]
// becomes when r holds it.
func (s *Set) bcast(c *Clock, bytes int, t []time.Duration) {
	n := len(s.members)
	if s.flatMessages() {
		for r := 1; r < n; r++ {
			t[r] = max(t[r], c.Send(0, r, bytes, t[0], s.m.Loopback))
		}
		return
	}
	ls := s.leaders()
	have := []int{0} // leaders (by host) holding the list, binomial tree
	for len(have) < len(ls) {
		k := len(have)
		for _, h := range have[:k] {
			if h+k < len(ls) {
				to := ls[h+k]
				t[to] = max(t[to], c.Send(ls[h], to, bytes, t[ls[h]], s.m.Net))
				have = append(have, h+k)
			}
		}
	}
	for _, l := range ls {
		for r := l + 1; r < min(l+s.m.HostSize, n); r++ {
			t[r] = max(t[r], c.Send(l, r, bytes, t[l], s.m.Shm))
		}
	}
}
