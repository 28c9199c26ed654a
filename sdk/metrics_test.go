package sdk

import (
	"context"
	"testing"
	"time"

	"github.com/hvdorg/hvd/internal/observe"
)

// With HVD_METRICS_PUBLISH every rank publishes its snapshot into the
// job's store: per set it belongs to (a set without rank 0 included), the
// ops and bytes it made, its backend and the phase histograms; without it
// nothing is metered or published.
func TestMetricsSnapshotsPublished(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HVD_METRICS_PUBLISH": "1", "HVD_METRICS_INTERVAL_SECONDS": "3600"},
		sets: func(int) [][]int { return [][]int{{1, 2}} }})
	each(t, ws, func(w *World) error {
		buf := make([]float32, 8)
		for i := 0; i < 4; i++ {
			if err := w.GlobalProcessSet().AllreduceInPlace(TensorOf(buf), ReduceOptions{}); err != nil {
				return err
			}
		}
		if ps, _ := w.ProcessSet(1); ps.Included() {
			for i := 0; i < 2; i++ {
				if err := ps.AllreduceInPlace(TensorOf(buf), ReduceOptions{}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	for r, w := range ws {
		want := map[int]uint64{0: 4}
		if r > 0 {
			want[1] = 2
		}
		// An op's execution time is recorded just after its caller wakes:
		// publish until the last one is in (or a second passed).
		var s *observe.RankSnapshot
		for end := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
			w.metrics.publish(false)
			b, err := w.cfg.Store.Get(context.Background(), observe.Scope+"/"+observe.KeyOf(r))
			if err != nil {
				t.Fatalf("rank %d published nothing: %v", r, err)
			}
			if s, err = observe.DecodeSnapshot(b); err != nil {
				t.Fatal(err)
			}
			done := len(s.Sets) == len(want)
			for _, set := range s.Sets {
				done = done && set.Execute.Count() == want[set.ID]
			}
			if done || time.Now().After(end) {
				break
			}
		}
		if s.Rank != r || s.Size != 3 || len(s.Sets) != len(want) {
			t.Fatalf("rank %d: snapshot %+v", r, s)
		}
		for _, set := range s.Sets {
			if len(set.Ops) != 1 || set.Ops[0].Op != "allreduce" || set.Ops[0].Ops != want[set.ID] || set.Ops[0].Bytes != 32*want[set.ID] ||
				set.Backend == "" || set.Execute.Count() != want[set.ID] || set.Queue.Count() != want[set.ID] {
				t.Errorf("rank %d set %d: %+v, want %d allreduces of 32 bytes", r, set.ID, set, want[set.ID])
			}
		}
	}
	off := mustWorlds(t, 2, worldOpts{})
	for _, w := range off {
		if w.metrics != nil || w.GlobalProcessSet().eng.Meter() != nil {
			t.Errorf("metrics on without HVD_METRICS_PUBLISH")
		}
	}
}

// A world of a later epoch counts as an elastic reset; a re-init at the
// same epoch (shutdown, init) does not.
func TestNoteEpochCountsResets(t *testing.T) {
	defer func(n uint64, e int64) { elasticResets.Store(n); lastEpoch.Store(e) }(elasticResets.Load(), lastEpoch.Load())
	elasticResets.Store(0)
	lastEpoch.Store(-1)
	for _, e := range []int{0, 0, 1, 3, 3} {
		noteEpoch(e)
	}
	if n := elasticResets.Load(); n != 2 {
		t.Errorf("epochs 0 0 1 3 3: %d resets, want 2", n)
	}
}
