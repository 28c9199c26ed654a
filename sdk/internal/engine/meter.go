// meter.go: what the engine counts for the job's metrics (docs/observability.md):
// ops and bytes per collective type, each op's time split into queueing,
// negotiation and execution, how full the fused responses fill the fusion
// buffer, and which ranks the stall inspector found missing. Atomics only,
// written by whoever runs the engine's steps and read from any goroutine;
// the engine knows nothing of how the numbers are served (sdk/metrics.go
// publishes them, internal/observe serves them).

package engine

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyBounds are the upper bounds (seconds) of the latency histograms'
// buckets: 10 µs ×4 per bucket up to 42 s; a last bucket takes the rest.
var LatencyBounds = []float64{10e-6, 40e-6, 160e-6, 640e-6, 2.56e-3, 10.24e-3, 40.96e-3, 163.84e-3, 655.36e-3, 2.62144, 10.48576, 41.94304}

// FillBounds are the upper bounds of the fusion-fill histogram's buckets
// (fused bytes over the fusion threshold).
var FillBounds = []float64{0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1}

// opKinds is the number of OpType values a Meter counts (Error excluded).
const opKinds = int(Reducescatter) + 1

// Histogram counts observations into fixed buckets (Bounds, then +Inf).
type Histogram struct {
	bounds []float64
	counts []atomic.Uint64 // len(bounds)+1
	sum    atomic.Uint64   // math.Float64bits of the sum, updated by CAS
}

func newHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe adds one value.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// HistogramSnapshot is a histogram's state: Counts[i] observations at most
// Bounds[i] (not cumulative), the last one above every bound.
type HistogramSnapshot struct {
	Bounds []float64
	Counts []uint64
	Sum    float64
}

// Snapshot copies the histogram.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts)), Sum: math.Float64frombits(h.sum.Load())}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	return s
}

// Meter is one engine's counters (Config.Meter; nil: nothing is counted).
type Meter struct {
	ops, bytes [opKinds]atomic.Uint64
	// Queue: from Enqueue to the start of the round that first takes the
	// op; Negotiate: from there to the start of its execution (the status
	// exchange, the wait for the other ranks and the coordinator);
	// Execute: from there to its completion.
	Queue, Negotiate, Execute *Histogram
	Fill                      *Histogram // fused responses: bytes / fusion threshold
	fused, fusedTensors       atomic.Uint64

	stallMu      sync.Mutex
	missingSince map[int]time.Time // global rank → since when the stall inspector misses it
	stallWarns   atomic.Uint64
}

// NewMeter returns an empty Meter.
func NewMeter() *Meter {
	return &Meter{Queue: newHistogram(LatencyBounds), Negotiate: newHistogram(LatencyBounds),
		Execute: newHistogram(LatencyBounds), Fill: newHistogram(FillBounds), missingSince: map[int]time.Time{}}
}

// OpCount is what a Meter counted for one collective type.
type OpCount struct {
	Type       OpType
	Ops, Bytes uint64
}

// MeterSnapshot is a Meter's state at one moment.
type MeterSnapshot struct {
	Ops                          []OpCount // types with at least one op, by type
	Queue, Negotiate, Execute    HistogramSnapshot
	Fill                         HistogramSnapshot
	FusedResponses, FusedTensors uint64
	StallWarnings                uint64
	// Missing: global rank → how long the stall inspector has found it
	// missing (tensors other ranks submitted and it did not).
	Missing map[int]time.Duration
}

// Snapshot copies the counters (safe from any goroutine).
func (m *Meter) Snapshot() MeterSnapshot {
	s := MeterSnapshot{Queue: m.Queue.Snapshot(), Negotiate: m.Negotiate.Snapshot(), Execute: m.Execute.Snapshot(),
		Fill: m.Fill.Snapshot(), FusedResponses: m.fused.Load(), FusedTensors: m.fusedTensors.Load(),
		StallWarnings: m.stallWarns.Load(), Missing: map[int]time.Duration{}}
	for t := range opKinds {
		if n := m.ops[t].Load(); n > 0 {
			s.Ops = append(s.Ops, OpCount{OpType(t), n, m.bytes[t].Load()})
		}
	}
	now := time.Now()
	m.stallMu.Lock()
	for r, since := range m.missingSince {
		s.Missing[r] = now.Sub(since)
	}
	m.stallMu.Unlock()
	return s
}

// stalls records the stall inspector's finding: the ranks missing from
// tensors that waited at least warn (an empty map: none).
func (m *Meter) stalls(stalled map[string][]int, warn time.Duration) {
	m.stallMu.Lock()
	defer m.stallMu.Unlock()
	if len(stalled) > 0 {
		m.stallWarns.Add(1)
	}
	now := time.Now()
	seen := map[int]bool{}
	for _, ranks := range stalled {
		for _, r := range ranks {
			seen[r] = true
			if _, ok := m.missingSince[r]; !ok {
				m.missingSince[r] = now.Add(-warn)
			}
		}
	}
	for r := range m.missingSince {
		if !seen[r] {
			delete(m.missingSince, r)
		}
	}
}

// nanotime is the clock of an op's phases (UnixNano).
func nanotime() int64 { return time.Now().UnixNano() }

// meterPicked marks the ops a round is about to take for the first time
// (the end of their queueing). The caller holds e.drv.
func (e *Engine) meterPicked() {
	if e.cfg.Meter == nil {
		return
	}
	now := nanotime()
	e.mu.Lock()
	for i := range e.queue {
		if o := e.table[e.queue[i].Name]; o != nil && o.pickAt == 0 {
			o.pickAt = now
		}
	}
	e.mu.Unlock()
}

// meterExecute records, as a response starts executing, the queueing and
// negotiation of its ops and, for a fused one, the fusion fill; it keeps
// the ops for meterExecuted. Clock reads are what metering costs (about
// 60 ns each on a VM), so there is one per response here and one there,
// besides one per op at Enqueue and one per round at pick-up.
func (e *Engine) meterExecute(r *Response) {
	m := e.cfg.Meter
	e.metered = e.metered[:0]
	if m == nil || r.Type == Error || r.Type == Join {
		return
	}
	now := nanotime()
	e.meterAt = now
	var total int64
	for _, o := range e.entries(r) {
		if o == nil {
			continue
		}
		e.metered = append(e.metered, o)
		total += int64(len(o.In.Data))
		if o.enqAt != 0 && o.pickAt != 0 {
			m.Queue.Observe(float64(o.pickAt-o.enqAt) / 1e9)
			m.Negotiate.Observe(float64(now-o.pickAt) / 1e9)
		}
	}
	if len(r.Names) > 1 && e.cfg.FusionThreshold > 0 {
		m.fused.Add(1)
		m.fusedTensors.Add(uint64(len(r.Names)))
		m.Fill.Observe(float64(total) / float64(e.cfg.FusionThreshold))
	}
}

// meterExecuted records, as a response's execution ends, the execution
// time of each of its ops that completed without error (one clock read
// for all of them: a fused response's ops end together).
func (e *Engine) meterExecuted() {
	m := e.cfg.Meter
	if m == nil || len(e.metered) == 0 {
		return
	}
	d := float64(nanotime()-e.meterAt) / 1e9
	for i, o := range e.metered {
		if o.h.Poll() && o.h.err == nil {
			m.Execute.Observe(d)
		}
		e.metered[i] = nil
	}
	e.metered = e.metered[:0]
}

// meterDone counts a completed op and its input bytes.
func (e *Engine) meterDone(o *Op) {
	m := e.cfg.Meter
	if m == nil || int(o.Type) >= opKinds {
		return
	}
	m.ops[o.Type].Add(1)
	m.bytes[o.Type].Add(uint64(len(o.In.Data)))
}

// Pending reports this rank's ops in flight on the set and how long the
// oldest has waited (0 when the engine has no Meter: it stamps enqueues
// only then). Safe from any goroutine.
func (e *Engine) Pending() (n int, oldest time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var first int64
	for _, o := range e.table {
		if o.enqAt != 0 && (first == 0 || o.enqAt < first) {
			first = o.enqAt
		}
	}
	if first != 0 {
		oldest = time.Duration(nanotime() - first)
	}
	return len(e.table) + len(e.joins), oldest
}

// Meter is the engine's Meter (nil: none).
func (e *Engine) Meter() *Meter { return e.cfg.Meter }

// Library is the data plane's timeline label (Config.Library).
func (e *Engine) Library() string { return e.cfg.Library }
