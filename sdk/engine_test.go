package sdk

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// Ranks enqueue the same named tensors in different orders; negotiation
// matches them by name and every rank gets every result.
func TestOutOfOrderEnqueue(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		ws := mustWorlds(t, n, worldOpts{})
		each(t, ws, func(w *World) error {
			names := []string{"a", "b", "c", "d", "e"}
			rng := rand.New(rand.NewPCG(uint64(w.Rank()), 1))
			rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			hs := map[string]*Handle{}
			for _, nm := range names {
				v := []float32{float32(w.Rank()), float32(len(nm) * int(nm[0]))}
				h, err := w.GlobalProcessSet().AllreduceAsync(TensorOf(v), ReduceOptions{Op: Sum, Name: nm})
				if err != nil {
					return err
				}
				hs[nm] = h
			}
			for nm, h := range hs {
				out, err := h.Wait()
				if err != nil {
					return err
				}
				if got := SliceOf[float32](out); got[0] != float32(n*(n-1)/2) || got[1] != float32(n*int(nm[0])) {
					return fmt.Errorf("%s: %v", nm, got)
				}
				if h.Name() != "allreduce."+nm {
					return fmt.Errorf("name %q", h.Name())
				}
			}
			return nil
		})
	}
}

func TestDuplicateNameAtEnqueue(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		h, err := g.AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Name: "x"})
		if err != nil {
			return err
		}
		if _, err := g.AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Name: "x"}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "already in flight") {
			return fmt.Errorf("duplicate: %v", err)
		}
		_, err = h.Wait()
		if err != nil {
			return err
		}
		// Once completed the name can be used again.
		_, err = g.Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "x"})
		return err
	})
}

// Every mismatch fails that op on every rank, naming the ranks and values,
// and the set keeps working afterwards.
func TestMismatchErrorsOnEveryRank(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	cases := []struct {
		name string
		call func(w *World) (*Handle, error)
		want string
	}{
		{"dtype", func(w *World) (*Handle, error) {
			if w.Rank() == 1 {
				return w.GlobalProcessSet().AllreduceAsync(TensorOf([]int32{1, 2}), ReduceOptions{Name: "m"})
			}
			return w.GlobalProcessSet().AllreduceAsync(TensorOf([]float32{1, 2}), ReduceOptions{Name: "m"})
		}, "the data types differ: ranks 0, 2 have float32, rank 1 has int32"},
		{"shape", func(w *World) (*Handle, error) {
			return w.GlobalProcessSet().AllreduceAsync(TensorOf(make([]float32, 2+w.Rank()/2)), ReduceOptions{Name: "m"})
		}, "the shapes differ: ranks 0, 1 have [2], rank 2 has [3]"},
		{"op", func(w *World) (*Handle, error) {
			op := Sum
			if w.Rank() == 0 {
				op = Max
			}
			return w.GlobalProcessSet().AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Name: "m", Op: op})
		}, "the reductions differ: rank 0 has max, ranks 1, 2 have sum"},
		{"root", func(w *World) (*Handle, error) {
			return w.GlobalProcessSet().BroadcastAsync(TensorOf([]float32{1}), w.Rank()%2, "m")
		}, "the root ranks differ: ranks 0, 2 have 0, rank 1 has 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, ws, func(w *World) error {
				h, err := tc.call(w)
				if err != nil {
					return err
				}
				_, err = h.Wait()
				if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
					return fmt.Errorf("got %v, want %q", err, tc.want)
				}
				// The set still works.
				_, err = w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "after-" + tc.name})
				return err
			})
		})
	}
}

// Fusion must not change results: the same random float32 tensors reduced
// with fusion on and off are bit-identical.
func TestFusionBitIdentical(t *testing.T) {
	results := map[string][][]float32{}
	for _, thr := range []string{"0", "134217728"} {
		ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HOROVOD_FUSION_THRESHOLD": thr}})
		var mu sync.Mutex
		each(t, ws, func(w *World) error {
			rng := rand.New(rand.NewPCG(uint64(w.Rank()), 9))
			var hs []*Handle
			for i := 0; i < 40; i++ {
				v := make([]float32, 1+i*37)
				for j := range v {
					v[j] = rng.Float32()*2 - 1
				}
				h, err := w.GlobalProcessSet().AllreduceInPlaceAsync(TensorOf(v), ReduceOptions{Name: fmt.Sprint("t", i)})
				if err != nil {
					return err
				}
				hs = append(hs, h)
			}
			var outs [][]float32
			for _, h := range hs {
				out, err := h.Wait()
				if err != nil {
					return err
				}
				outs = append(outs, SliceOf[float32](out))
			}
			if w.Rank() == 1 {
				mu.Lock()
				results[thr] = outs
				mu.Unlock()
			}
			return nil
		})
	}
	a, b := results["0"], results["134217728"]
	if len(a) != 40 || len(b) != 40 {
		t.Fatalf("missing results")
	}
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Fatalf("tensor %d differs with fusion", i)
		}
	}
}

func TestGroupedOps(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		outs, err := g.GroupedAllreduce([]Tensor{TensorOf([]int64{1, 2}), TensorOf([]int64{int64(w.Rank())})}, ReduceOptions{Op: Sum, Name: "grp"})
		if err != nil {
			return err
		}
		if !slices.Equal(SliceOf[int64](outs[0]), []int64{3, 6}) || SliceOf[int64](outs[1])[0] != 3 {
			return fmt.Errorf("grouped allreduce: %v %v", SliceOf[int64](outs[0]), SliceOf[int64](outs[1]))
		}
		h, err := g.GroupedAllgatherAsync([]Tensor{TensorOf([]int32{int32(w.Rank())}), TensorOf([]int32{7, 7})}, "gg")
		if err != nil {
			return err
		}
		if _, err := h.Wait(); err != nil {
			return err
		}
		if got := SliceOf[int32](h.Outputs()[0]); !slices.Equal(got, []int32{0, 1, 2}) {
			return fmt.Errorf("grouped allgather: %v", got)
		}
		return nil
	})
}

// Join: each rank in turn joins first while the others keep reducing; the
// joined rank contributes zeros, Average still divides by the full size,
// and every rank learns who joined last.
func TestJoinEveryRankFirst(t *testing.T) {
	const n = 3
	ws := mustWorlds(t, n, worldOpts{})
	for first := 0; first < n; first++ {
		t.Run(fmt.Sprint("first", first), func(t *testing.T) {
			last := make([]int, n)
			each(t, ws, func(w *World) error {
				if w.Rank() != first {
					v := TensorOf([]float32{6})
					if err := w.GlobalProcessSet().AllreduceInPlace(v, ReduceOptions{Name: fmt.Sprint("j", first)}); err != nil {
						return err
					}
					if got := SliceOf[float32](v)[0]; got != 4 { // (6+6+0)/3
						return fmt.Errorf("allreduce with a joined rank: %v", got)
					}
					// Named: unnamed ops must run in the same order on every
					// rank, and the joined rank skips these.
					_, err := wait(w.GlobalProcessSet().AllgatherAsync(TensorOf([]float32{1}), fmt.Sprint("g", first)))
					if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "not supported with Join") {
						return fmt.Errorf("allgather during join: %v", err)
					}
					if w.Rank() == (first+1)%n {
						time.Sleep(20 * time.Millisecond) // make the join order deterministic
					}
				}
				if w.Rank() == (first+2)%n {
					time.Sleep(60 * time.Millisecond)
				}
				r, err := w.Join()
				last[w.Rank()] = r
				return err
			})
			for r, l := range last {
				if l != (first+2)%n {
					t.Errorf("rank %d: last joined %d, want %d", r, l, (first+2)%n)
				}
			}
		})
	}
}

// A barrier on one subset while another subset is busy with its own work:
// sets negotiate independently.
func TestBarrierOnSubsetWhileOtherSetWorks(t *testing.T) {
	ws := mustWorlds(t, 4, worldOpts{sets: func(int) [][]int { return [][]int{{0, 1}, {2, 3}} }})
	each(t, ws, func(w *World) error {
		a, _ := w.FindProcessSet([]int{0, 1})
		b, _ := w.FindProcessSet([]int{2, 3})
		if a.Included() {
			for i := 0; i < 20; i++ {
				if err := a.Barrier(); err != nil {
					return err
				}
			}
			return nil
		}
		v := make([]float32, 1<<18)
		for i := 0; i < 5; i++ {
			if err := b.AllreduceInPlace(TensorOf(v), ReduceOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// A rank that never enqueues: the coordinator's stall warning names it and
// the tensor; with a shutdown time, the op fails instead of hanging.
func TestStallWarningAndShutdown(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	ws := mustWorlds(t, 3, worldOpts{
		env: map[string]string{"HOROVOD_STALL_CHECK_TIME_SECONDS": "0.2", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0.5"},
		logf: func(f string, a ...any) {
			mu.Lock()
			logs = append(logs, fmt.Sprintf(f, a...))
			mu.Unlock()
		},
	})
	each(t, ws, func(w *World) error {
		if w.Rank() == 2 {
			return nil // never submits "lonely"
		}
		_, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "lonely"})
		if err == nil {
			return errors.New("a stalled op completed")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	joined := strings.Join(logs, "\n")
	if !strings.Contains(joined, "allreduce.lonely (missing ranks: [2])") {
		t.Fatalf("stall warning does not name rank 2 and the tensor:\n%s", joined)
	}
}

func TestCompressionRestoresDType(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{})
	each(t, ws, func(w *World) error {
		for _, c := range []Compression{CompressionFP16, CompressionBF16} {
			in := []float64{1.5, -2.25, float64(w.Rank()) + 0.125}
			out, err := w.GlobalProcessSet().Allreduce(TensorOf(in), ReduceOptions{Op: Sum, Compression: c})
			if err != nil {
				return err
			}
			if out.DType != Float64 || !slices.Equal(SliceOf[float64](out), []float64{3, -4.5, 1.25}) {
				return fmt.Errorf("%v: %v %v", c, out.DType, SliceOf[float64](out))
			}
			f := []float32{0.1}
			if err := w.GlobalProcessSet().AllreduceInPlace(TensorOf(f), ReduceOptions{Op: Sum, Compression: c}); err != nil {
				return err
			}
			// 0.1 is not exact in 16 bits: the result carries the wire precision.
			if f[0] == 0.2 || f[0] < 0.19 || f[0] > 0.21 {
				return fmt.Errorf("%v in place: %v", c, f[0])
			}
			ints := TensorOf([]int32{7})
			if err := w.GlobalProcessSet().AllreduceInPlace(ints, ReduceOptions{Op: Sum, Compression: c}); err != nil || SliceOf[int32](ints)[0] != 14 {
				return fmt.Errorf("ints are not compressed: %v %v", err, SliceOf[int32](ints))
			}
			rs, err := w.GlobalProcessSet().Reducescatter(TensorOf([]float32{1, 2, 3, 4}, 4, 1), ReduceOptions{Op: Sum, Compression: c})
			if err != nil || rs.DType != Float32 || !slices.Equal(SliceOf[float32](rs), []float32{2 + 4*float32(w.Rank()), 4 + 4*float32(w.Rank())}) {
				return fmt.Errorf("%v reducescatter: %v %v", c, err, SliceOf[float32](rs))
			}
		}
		return nil
	})
}

// HOROVOD_TIMELINE writes a Chrome trace on rank 0 with Horovod's phase
// names; parse it back.
func TestTimelineFile(t *testing.T) {
	path := t.TempDir() + "/timeline.json"
	ws := mustWorlds(t, 2, worldOpts{env: map[string]string{"HOROVOD_TIMELINE": path}})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		// A group is released together, so it is fused: MEMCPY events.
		ts := []Tensor{TensorOf([]float32{1, 2}), TensorOf([]float32{3}), TensorOf([]float32{4})}
		if _, err := g.GroupedAllreduce(ts, ReduceOptions{Name: "grad"}); err != nil {
			return err
		}
		if _, err := g.Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "grad0"}); err != nil {
			return err
		}
		_, err := g.Allgather(TensorOf([]int32{1}))
		return err
	})
	ws[0].Close()
	events, err := timeline.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	procs := map[string]bool{}
	for _, e := range events {
		seen[e.Name] = true
		if e.Name == "process_name" {
			procs[fmt.Sprint(e.Args["name"])] = true
		}
	}
	// The data plane's label (backends' registry): one host, so shm.
	for _, want := range []string{"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "SHM_ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER", "NEGOTIATE_ALLGATHER", "ALLGATHER", "SHM_ALLGATHER", "0", "1"} {
		if !seen[want] {
			t.Errorf("no %q event in the timeline", want)
		}
	}
	if !procs["allreduce.grad0"] || !procs["grouped_allreduce.grad_2of3"] || !procs["allgather.noname.1"] {
		t.Errorf("tensors missing from the timeline: %v", procs)
	}
}

// Steady state: after the first iteration, the same named tensors are
// served from the response cache, skipping the coordinator; changing a
// shape invalidates the entry everywhere, and a rank that changes it alone
// gets a mismatch error instead of a hang.
func TestResponseCache(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		step := func(it int, n int) error {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(it)
			}
			if err := g.AllreduceInPlace(TensorOf(v), ReduceOptions{Op: Sum, Name: "w"}); err != nil {
				return err
			}
			if v[0] != float32(3*it) {
				return fmt.Errorf("iteration %d: %v", it, v[0])
			}
			return nil
		}
		if err := step(1, 4); err != nil {
			return err
		}
		before := g.Stats()
		for it := 2; it <= 11; it++ {
			if err := step(it, 4); err != nil {
				return err
			}
		}
		after := g.Stats()
		if got := after.CachedOps - before.CachedOps; got != 10 {
			return fmt.Errorf("%d of 10 steady-state ops came from the cache", got)
		}
		if after.SentRequests != before.SentRequests {
			return fmt.Errorf("steady state still sent %d requests to the coordinator", after.SentRequests-before.SentRequests)
		}
		// Same name, new shape on every rank: renegotiated, correct.
		if err := step(12, 7); err != nil {
			return err
		}
		// Only rank 1 changes the shape: a clear error on every rank.
		n := 7
		if w.Rank() == 1 {
			n = 5
		}
		err := step(13, n)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank 1 has [5]") {
			return fmt.Errorf("changed shape on one rank: %v", err)
		}
		return step(14, 7)
	})
}

func TestTimelineDynamic(t *testing.T) {
	ws := mustWorlds(t, 1, worldOpts{})
	if err := ws[0].StartTimeline(t.TempDir()+"/x.json", false); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "HOROVOD_TIMELINE=DYNAMIC") {
		t.Fatalf("without DYNAMIC: %v", err)
	}
	ws = mustWorlds(t, 2, worldOpts{env: map[string]string{"HOROVOD_TIMELINE": "DYNAMIC"}})
	path := t.TempDir() + "/dyn.json"
	each(t, ws, func(w *World) error {
		if _, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "before"}); err != nil {
			return err
		}
		if err := w.StartTimeline(path, true); err != nil {
			return err
		}
		if _, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "during"}); err != nil {
			return err
		}
		if err := w.GlobalProcessSet().Barrier(); err != nil {
			return err
		}
		return w.StopTimeline()
	})
	events, err := timeline.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range events {
		if e.Name == "process_name" {
			names[fmt.Sprint(e.Args["name"])] = true
		}
	}
	if !names["allreduce.during"] || names["allreduce.before"] {
		t.Fatalf("timeline tensors: %v", names)
	}
}

// Fused allgathers (several tensors, different dim 0 on every rank) give
// exactly what unfused ones give.
func TestAllgatherFusionBitIdentical(t *testing.T) {
	results := map[string][][]int32{}
	for _, thr := range []string{"0", "134217728"} {
		ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HOROVOD_FUSION_THRESHOLD": thr}})
		var mu sync.Mutex
		each(t, ws, func(w *World) error {
			ts := make([]Tensor, 12)
			for i := range ts {
				rows := (w.Rank() + i) % 4 // includes empty blocks
				v := make([]int32, rows*3)
				for j := range v {
					v[j] = int32(1000*w.Rank() + 10*i + j)
				}
				ts[i] = TensorOf(v, int64(rows), 3)
			}
			h, err := w.GlobalProcessSet().GroupedAllgatherAsync(ts, "fa")
			if err != nil {
				return err
			}
			if _, err := h.Wait(); err != nil {
				return err
			}
			var outs [][]int32
			for i, o := range h.Outputs() {
				var want []int32
				for r := 0; r < 3; r++ {
					rows := (r + i) % 4
					for j := 0; j < rows*3; j++ {
						want = append(want, int32(1000*r+10*i+j))
					}
				}
				if got := SliceOf[int32](o); !slices.Equal(got, want) || o.Shape[1] != 3 {
					return fmt.Errorf("tensor %d: %v %v, want %v", i, o.Shape, got, want)
				}
				outs = append(outs, SliceOf[int32](o))
			}
			if w.Rank() == 0 {
				mu.Lock()
				results[thr] = outs
				mu.Unlock()
			}
			return nil
		})
	}
	for i := range results["0"] {
		if !slices.Equal(results["0"][i], results["134217728"][i]) {
			t.Fatalf("tensor %d differs with fusion", i)
		}
	}
}

// HOROVOD_CACHE_CAPACITY=0: every op goes through the coordinator and
// results are unchanged.
func TestResponseCacheDisabled(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{env: map[string]string{"HOROVOD_CACHE_CAPACITY": "0"}})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		before := g.Stats()
		for it := 1; it <= 5; it++ {
			v := []float32{float32(it)}
			if err := g.AllreduceInPlace(TensorOf(v), ReduceOptions{Op: Sum, Name: "w"}); err != nil {
				return err
			}
			if v[0] != float32(2*it) {
				return fmt.Errorf("iteration %d: %v", it, v[0])
			}
		}
		after := g.Stats()
		if after.CachedOps != before.CachedOps || after.SentRequests-before.SentRequests != 5 {
			return fmt.Errorf("cache disabled but stats %+v -> %+v", before, after)
		}
		return nil
	})
}

// Shutting down with an op in flight fails it with ErrShutdown; nothing hangs.
func TestCloseWithPendingOp(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{})
	h, err := ws[0].GlobalProcessSet().AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Name: "never"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := h.Wait(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	for _, w := range ws {
		w.Close()
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending op not failed by Close")
	}
	if _, err := ws[0].GlobalProcessSet().AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{}); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("enqueue after close: %v", err)
	}
}

// Every method of a nil *ProcessSet (what a closed World hands out) returns
// an error or a zero answer; none panics.
func TestNilProcessSetNeverPanics(t *testing.T) {
	var ps *ProcessSet
	t1 := TensorOf([]float32{1, 2})
	_, e1 := ps.Allreduce(t1, ReduceOptions{})
	e2 := ps.AllreduceInPlace(t1, ReduceOptions{})
	_, e3 := ps.GroupedAllreduce([]Tensor{t1}, ReduceOptions{})
	_, e4 := ps.Allgather(t1)
	e5 := ps.Broadcast(t1, 0)
	_, _, e6 := ps.Alltoall(t1, nil)
	_, e7 := ps.Reducescatter(t1, ReduceOptions{})
	e8 := ps.Barrier()
	e9 := ps.Send(t1, 0, 0)
	e10 := ps.Recv(t1, 0, 0)
	_, e11 := ps.Rank()
	for i, err := range []error{e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11} {
		if !errors.Is(err, ErrNotInitialized) {
			t.Errorf("call %d: %v", i+1, err)
		}
	}
	if ps.Size() != 0 || ps.Included() || ps.ID() != -1 || ps.Ranks() != nil || ps.Communicator() != nil || ps.String() == "" {
		t.Error("queries on nil")
	}
	_ = ps.Stats()
}
