package engine

import (
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

func sumCounts(h HistogramSnapshot) (n uint64) {
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// A Meter counts every completed op of its type with its input bytes, one
// queueing, negotiation and execution time per op, and the fill of fused
// responses; an engine without one stamps nothing.
func TestMeterCountsOpsBytesPhasesAndFusion(t *testing.T) {
	m := NewMeter()
	e, err := New(Config{Data: newSolo(), Control: newSolo(), CacheCapacity: 8, FusionThreshold: 64, Meter: m, CycleTime: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(nil)
	ar := func(name string, n int) *Op {
		o := &Op{Type: Allreduce, Name: name, In: Tensor{Data: make([]byte, 4*n), DType: backends.Float32, Shape: []int64{int64(n)}}, ReduceOp: 1}
		o.Out = o.In
		return o
	}
	for i := 0; i < 3; i++ {
		o := ar("a", 2)
		if err := e.Enqueue(o); err != nil {
			t.Fatal(err)
		}
		if err := o.Handle().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	// Two tensors enqueued together are fused: 8+8 bytes of a 64-byte buffer.
	x, y := ar("x", 2), ar("y", 2)
	if err := e.Enqueue(x, y); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*Op{x, y} {
		if err := o.Handle().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	b := &Op{Type: Barrier, Name: "b"}
	if err := e.Enqueue(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Handle().Wait(); err != nil {
		t.Fatal(err)
	}
	e.Close(nil) // the engine goroutine finished its last round (the execution times come at its end)
	s := m.Snapshot()
	want := []OpCount{{Allreduce, 5, 40}, {Barrier, 1, 0}}
	if len(s.Ops) != len(want) || s.Ops[0] != want[0] || s.Ops[1] != want[1] {
		t.Errorf("ops %+v, want %+v", s.Ops, want)
	}
	for name, h := range map[string]HistogramSnapshot{"queue": s.Queue, "negotiate": s.Negotiate, "execute": s.Execute} {
		if n := sumCounts(h); n != 6 {
			t.Errorf("%s histogram holds %d observations, want 6 (one per op)", name, n)
		}
	}
	if s.FusedResponses != 1 || s.FusedTensors != 2 || sumCounts(s.Fill) != 1 || s.Fill.Sum != 0.25 {
		t.Errorf("fusion: %d responses, %d tensors, fill %+v; want 1, 2, one fill of 0.25", s.FusedResponses, s.FusedTensors, s.Fill)
	}
	if n, _ := e.Pending(); n != 0 {
		t.Errorf("%d ops pending after every op completed", n)
	}
}

// The stall inspector's finding is kept per missing rank until a check no
// longer finds it.
func TestMeterStalls(t *testing.T) {
	m := NewMeter()
	m.stalls(map[string][]int{"g": {2}, "h": {2, 3}}, time.Second)
	s := m.Snapshot()
	if len(s.Missing) != 2 || s.Missing[2] < time.Second || s.Missing[3] < time.Second || s.StallWarnings != 1 {
		t.Errorf("after a stall naming 2 and 3: %+v", s)
	}
	m.stalls(map[string][]int{"h": {3}}, time.Second)
	m.stalls(nil, time.Second)
	if s := m.Snapshot(); len(s.Missing) != 0 || s.StallWarnings != 2 {
		t.Errorf("after the stall cleared: %+v", s)
	}
}
