// monitor.go: the serving side's picture of the job — every rank's latest
// snapshot and when it last changed (on the reader's clock), what the
// launcher knows (processes started and exited, the elastic world's
// history), and each set's recent throughput — and Status, the pure
// function that turns it into the rows of the status page.

package observe

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Rank states on the status page.
const (
	StateStarting = "starting" // no snapshot yet
	StateRunning  = "running"
	StateWaiting  = "waiting"  // an op has waited over WaitAfter for other ranks
	StateStalled  = "stalled"  // silent for over StallAfter (stopped, swapped out, hung)
	StateDead     = "dead"     // exited with a failure
	StateFinished = "finished" // shut hvd down, or exited 0
)

// Getter reads one rank's snapshot from the store (ok false: none yet).
type Getter func(ctx context.Context, rank int) (value []byte, ok bool, err error)

// Config tunes a Monitor; zero values take the defaults.
type Config struct {
	Interval   time.Duration // how often Run reads the snapshots (1 s)
	StallAfter time.Duration // a rank silent this long is stalled (3 s, at least 3 Intervals)
	WaitAfter  time.Duration // an op pending this long makes its rank waiting (1 s)
	History    int           // throughput points kept per set (120)
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.StallAfter <= 0 {
		c.StallAfter = max(3*time.Second, 3*c.Interval)
	}
	if c.WaitAfter <= 0 {
		c.WaitAfter = time.Second
	}
	if c.History <= 0 {
		c.History = 120
	}
	return c
}

// Event is a line of the job's history (elastic worlds, stalls, exits).
type Event struct {
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// Point is one throughput sample of a set: input bytes per second summed
// over its members.
type Point struct {
	Time        time.Time `json:"time"`
	BytesPerSec float64   `json:"bytes_per_s"`
}

// StoreStats are the rendezvous store's counters (when the serving
// process hosts the store).
type StoreStats struct {
	Requests map[string]int64 `json:"requests"` // by method
	Refused  map[string]int64 `json:"refused"`  // by HTTP status code
}

type seen struct {
	snap    *RankSnapshot
	changed time.Time // reader's clock
}

type proc struct {
	host   string
	pid    int
	exited string // "" while running
	failed bool
}

// Monitor keeps what the server shows. Safe for concurrent use.
type Monitor struct {
	cfg        Config
	get        Getter
	storeStats func() StoreStats

	mu       sync.Mutex
	size     int // the launcher's world size (0: from rank 0's snapshot)
	epoch    int
	ranks    map[int]*seen
	procs    map[int]*proc
	events   []Event
	warnings []Event
	stalled  map[int]time.Time // ranks shown stalled, since
	tput     map[int][]Point
	last     map[int]struct {
		t time.Time
		b uint64
	}
}

// NewMonitor reads snapshots through get. storeStats may be nil.
func NewMonitor(cfg Config, get Getter, storeStats func() StoreStats) *Monitor {
	return &Monitor{cfg: cfg.withDefaults(), get: get, storeStats: storeStats, ranks: map[int]*seen{}, procs: map[int]*proc{},
		stalled: map[int]time.Time{}, tput: map[int][]Point{}, last: map[int]struct {
			t time.Time
			b uint64
		}{}}
}

// World tells the monitor the world's size and epoch (the launcher's
// view; elastic jobs call it for every world).
func (m *Monitor) World(size, epoch int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch != m.epoch {
		clear(m.procs)
	}
	m.size, m.epoch = size, epoch
}

// RankStarted records a rank's process.
func (m *Monitor) RankStarted(rank int, host string, pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.procs[rank] = &proc{host: host, pid: pid}
}

// RankExited records how a rank's process ended (failed: not status 0).
func (m *Monitor) RankExited(rank int, reason string, failed bool) {
	m.mu.Lock()
	p := m.procs[rank]
	if p == nil {
		p = &proc{}
		m.procs[rank] = p
	}
	p.exited, p.failed = reason, failed
	m.mu.Unlock()
	m.Event(fmt.Sprintf("rank %d %s", rank, reason))
}

// Event appends a line to the job's history (the last 200 are kept).
func (m *Monitor) Event(text string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = appendCapped(m.events, Event{time.Now(), text}, 200)
}

func appendCapped[T any](xs []T, x T, n int) []T {
	xs = append(xs, x)
	if len(xs) > n {
		xs = slices.Delete(xs, 0, len(xs)-n)
	}
	return xs
}

// Run polls the snapshots every Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads every rank's snapshot once and updates the history.
func (m *Monitor) Poll(ctx context.Context) {
	m.mu.Lock()
	size := m.size
	if s := m.ranks[0]; size == 0 && s != nil {
		size = s.snap.Size
	}
	m.mu.Unlock()
	if size == 0 {
		size = 1 // rank 0 tells the size
	}
	got := map[int]*RankSnapshot{}
	for r := 0; r < size; r++ {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.Interval)
		b, ok, err := m.get(cctx, r)
		cancel()
		if err != nil || !ok {
			continue
		}
		if s, err := DecodeSnapshot(b); err == nil && s.Rank == r {
			got[r] = s
		}
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for r, s := range got {
		old := m.ranks[r]
		if old == nil || old.snap.Seq != s.Seq || old.snap.PID != s.PID || old.snap.Epoch != s.Epoch {
			m.ranks[r] = &seen{snap: s, changed: now}
		}
	}
	for r := range m.ranks {
		if r >= size && m.size > 0 {
			delete(m.ranks, r) // left in an elastic shrink
		}
	}
	m.sample(now)
	m.noteStalls(now)
}

// sample appends a throughput point per set (caller holds m.mu).
func (m *Monitor) sample(now time.Time) {
	total := map[int]uint64{}
	for _, s := range m.ranks {
		for _, set := range s.snap.Sets {
			for _, o := range set.Ops {
				total[set.ID] += o.Bytes
			}
		}
	}
	for id, b := range total {
		if prev, ok := m.last[id]; ok && now.After(prev.t) {
			bps := 0.0
			if b >= prev.b {
				bps = float64(b-prev.b) / now.Sub(prev.t).Seconds()
			}
			m.tput[id] = appendCapped(m.tput[id], Point{now, bps}, m.cfg.History)
		}
		m.last[id] = struct {
			t time.Time
			b uint64
		}{now, b}
	}
}

// noteStalls logs ranks entering and leaving the stalled state (caller
// holds m.mu).
func (m *Monitor) noteStalls(now time.Time) {
	for r, s := range m.ranks {
		silent := now.Sub(s.changed)
		_, was := m.stalled[r]
		is := silent > m.cfg.StallAfter && !s.snap.Closed && !m.exited(r)
		switch {
		case is && !was:
			m.stalled[r] = s.changed
			m.warnings = appendCapped(m.warnings, Event{now, fmt.Sprintf("rank %d (%s, pid %d) stalled: silent for %.1f s", r, s.snap.Host, s.snap.PID, silent.Seconds())}, 50)
		case !is && was:
			m.warnings = appendCapped(m.warnings, Event{now, fmt.Sprintf("rank %d running again after %.1f s", r, now.Sub(m.stalled[r]).Seconds())}, 50)
			delete(m.stalled, r)
		}
	}
}

func (m *Monitor) exited(r int) bool {
	p := m.procs[r]
	return p != nil && p.exited != ""
}

// Snapshots returns the latest snapshot of every rank seen, by rank.
func (m *Monitor) Snapshots() []*RankSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*RankSnapshot, 0, len(m.ranks))
	for _, s := range m.ranks {
		out = append(out, s.snap)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// RankStatus is one row of the status page.
type RankStatus struct {
	Rank     int     `json:"rank"`
	Host     string  `json:"host"`
	PID      int     `json:"pid"`
	State    string  `json:"state"`
	Detail   string  `json:"detail,omitempty"`
	Op       string  `json:"op,omitempty"`        // what its engines are doing
	WaitsFor []int   `json:"waits_for,omitempty"` // ranks its pending ops wait for
	LastSeen float64 `json:"last_seen_s"`         // seconds since its snapshot last changed
}

// SetStatus is one process set on the status page.
type SetStatus struct {
	ID         int     `json:"id"`
	Ranks      []int   `json:"ranks"`
	Backend    string  `json:"backend"`
	Ops        uint64  `json:"ops"` // summed over members
	Throughput []Point `json:"throughput"`
}

// Status is what / and /status.json show.
type Status struct {
	Time     time.Time    `json:"time"`
	Size     int          `json:"size"`
	Epoch    int          `json:"epoch"`
	Ranks    []RankStatus `json:"ranks"`
	Sets     []SetStatus  `json:"sets"`
	Stalls   []Event      `json:"stalls"` // recent stall warnings, oldest first
	Events   []Event      `json:"events"` // the job's history: elastic worlds, exits
	Store    *StoreStats  `json:"store,omitempty"`
	Interval float64      `json:"interval_s"`
}

// Status computes the page's data at now.
func (m *Monitor) Status(now time.Time) Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noteStalls(now) // the warnings agree with the states below
	st := Status{Time: now, Size: m.size, Epoch: m.epoch, Interval: m.cfg.Interval.Seconds(),
		Stalls: append([]Event{}, m.warnings...), Events: append([]Event{}, m.events...), Ranks: []RankStatus{}, Sets: []SetStatus{}}
	if s := m.ranks[0]; st.Size == 0 && s != nil {
		st.Size = s.snap.Size
	}
	if m.storeStats != nil {
		ss := m.storeStats()
		st.Store = &ss
	}
	// First pass: each rank's own state.
	state := map[int]*RankStatus{}
	for r := 0; r < max(st.Size, 1); r++ {
		rs := &RankStatus{Rank: r, State: StateStarting, LastSeen: -1}
		if p := m.procs[r]; p != nil {
			rs.Host, rs.PID = p.host, p.pid
		}
		if s := m.ranks[r]; s != nil && s.snap.Epoch < m.epoch {
			// An elastic reset: this rank has not published in the
			// launcher's new world yet (its key holds the old world's).
			rs.Detail = fmt.Sprintf("joining world %d (last seen in world %d)", m.epoch, s.snap.Epoch)
		} else if s != nil {
			rs.Host, rs.PID = s.snap.Host, s.snap.PID
			rs.LastSeen = now.Sub(s.changed).Seconds()
			rs.State = StateRunning
			var ops []string
			for _, set := range s.snap.Sets {
				if set.Activity != "" {
					ops = append(ops, "set "+strconv.Itoa(set.ID)+": "+set.Activity)
				}
				if set.Pending > 0 && set.OldestPending >= m.cfg.WaitAfter.Seconds() {
					rs.State = StateWaiting
					rs.Detail = fmt.Sprintf("%d op(s) pending on set %d for %.1f s", set.Pending, set.ID, set.OldestPending)
				}
			}
			if len(ops) > 0 {
				rs.Op = ops[0]
				for _, o := range ops[1:] {
					rs.Op += "; " + o
				}
			}
			switch {
			case s.snap.Closed:
				rs.State, rs.Detail = StateFinished, "shut down"
			case now.Sub(s.changed) > m.cfg.StallAfter:
				rs.State = StateStalled
				rs.Detail = fmt.Sprintf("no snapshot for %.1f s (stopped, swapped out or hung)", now.Sub(s.changed).Seconds())
			}
		}
		if p := m.procs[r]; p != nil && p.exited != "" {
			rs.State, rs.Detail = StateFinished, p.exited
			if p.failed {
				rs.State = StateDead
			}
		}
		state[r] = rs
	}
	// Second pass: whom a waiting rank waits for — the members of the set
	// it waits on that are not in that set's collective themselves (no op
	// pending there, or not live), and whom the stall inspector misses.
	sets := map[int]*SetStatus{}
	pendingOn := func(r, id int) bool {
		if s := m.ranks[r]; s != nil {
			for _, set := range s.snap.Sets {
				if set.ID == id {
					return set.Pending > 0
				}
			}
		}
		return false
	}
	for r := 0; r < max(st.Size, 1); r++ {
		s := m.ranks[r]
		if s == nil {
			continue
		}
		for _, set := range s.snap.Sets {
			ss := sets[set.ID]
			if ss == nil {
				ss = &SetStatus{ID: set.ID, Ranks: set.Ranks, Backend: set.Backend, Throughput: slices.Clone(m.tput[set.ID])}
				sets[set.ID] = ss
			}
			for _, o := range set.Ops {
				ss.Ops += o.Ops
			}
			rs := state[r]
			if rs.State != StateWaiting || set.Pending == 0 || set.OldestPending < m.cfg.WaitAfter.Seconds() {
				continue
			}
			for _, peer := range set.Ranks {
				if peer == r {
					continue
				}
				ps := state[peer]
				live := ps != nil && (ps.State == StateRunning || ps.State == StateWaiting)
				if !live || !pendingOn(peer, set.ID) {
					rs.WaitsFor = append(rs.WaitsFor, peer)
				}
			}
			for k := range set.Missing {
				if g, err := strconv.Atoi(k); err == nil && !slices.Contains(rs.WaitsFor, g) && g != r {
					rs.WaitsFor = append(rs.WaitsFor, g)
				}
			}
			slices.Sort(rs.WaitsFor)
			rs.WaitsFor = slices.Compact(rs.WaitsFor)
		}
	}
	for r := 0; r < max(st.Size, 1); r++ {
		st.Ranks = append(st.Ranks, *state[r])
	}
	for _, ss := range sets {
		st.Sets = append(st.Sets, *ss)
	}
	sort.Slice(st.Sets, func(i, j int) bool { return st.Sets[i].ID < st.Sets[j].ID })
	return st
}
