package sdk

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// executionOrder returns, from rank 0's timeline, the tensors in the order
// their ops started executing (the "B" event of the op's activity, e.g.
// ALLREDUCE), restricted to names with the given prefix.
func executionOrder(t *testing.T, path, prefix string) []string {
	t.Helper()
	events, err := timeline.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[int]string{}
	var order []string
	for _, e := range events {
		if e.Name == "process_name" && e.Ph == "M" {
			names[e.Pid] = fmt.Sprint(e.Args["name"])
			continue
		}
		switch e.Name {
		case "ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER":
			if e.Ph == "B" && strings.Contains(names[e.Pid], prefix) {
				order = append(order, names[e.Pid])
			}
		}
	}
	return order
}

// Priorities: every rank enqueues the same tensors in its own order
// (rotated by rank) within one cycle (HOROVOD_CYCLE_TIME holds the round
// until all are queued), so the coordinator sees them all ready in one
// round; they must execute by priority, higher first, whatever the arrival
// order — allreduces, an allgather, a broadcast, an alltoall and a
// reducescatter alike — and one whose ranks disagree runs at the highest
// priority any rank gave. Fusion is off so that every op is its own step.
// np 3: an odd count; the results are checked too.
func TestPriorityOrder(t *testing.T) {
	path := t.TempDir() + "/timeline.json"
	const n = 3
	ws := mustWorlds(t, n, worldOpts{env: map[string]string{
		"HOROVOD_TIMELINE": path, "HOROVOD_CYCLE_TIME": "300", "HOROVOD_FUSION_THRESHOLD": "0"}})
	type op struct {
		name string
		prio int
		run  func(w *World, prio int) (*Handle, func() error, error)
	}
	allreduce := func(name string) func(w *World, prio int) (*Handle, func() error, error) {
		return func(w *World, prio int) (*Handle, func() error, error) {
			h, err := w.GlobalProcessSet().AllreduceAsync(TensorOf([]float32{float32(w.Rank() + 1)}),
				ReduceOptions{Op: Sum, Name: name, Priority: prio})
			return h, func() error {
				out, err := h.Wait()
				if err == nil && SliceOf[float32](out)[0] != n*(n+1)/2 {
					err = fmt.Errorf("%s: got %v", name, SliceOf[float32](out))
				}
				return err
			}, err
		}
	}
	ops := []op{
		{"prio.a", 3, allreduce("prio.a")},
		{"prio.b", 0, allreduce("prio.b")},
		{"prio.c", 7, allreduce("prio.c")},
		{"prio.d", -2, allreduce("prio.d")},
		{"prio.e", 5, func(w *World, prio int) (*Handle, func() error, error) {
			h, err := w.GlobalProcessSet().AllgatherAsync(TensorOf([]int32{int32(w.Rank())}), "prio.e", Priority(prio))
			return h, func() error {
				out, err := h.Wait()
				if err == nil && !slices.Equal(SliceOf[int32](out), []int32{0, 1, 2}) {
					err = fmt.Errorf("prio.e: got %v", SliceOf[int32](out))
				}
				return err
			}, err
		}},
		{"prio.f", 6, func(w *World, prio int) (*Handle, func() error, error) {
			buf := []float64{float64(w.Rank())}
			h, err := w.GlobalProcessSet().BroadcastAsync(TensorOf(buf), 2, "prio.f", Priority(prio))
			return h, func() error {
				if _, err := h.Wait(); err != nil {
					return err
				}
				if buf[0] != 2 {
					return fmt.Errorf("prio.f: got %v", buf)
				}
				return nil
			}, err
		}},
		{"prio.g", 1, func(w *World, prio int) (*Handle, func() error, error) {
			h, err := w.GlobalProcessSet().AlltoallAsync(TensorOf([]int64{1, 2, 3}), nil, "prio.g", Priority(prio))
			return h, func() error { _, err := h.Wait(); return err }, err
		}},
		{"prio.h", 4, func(w *World, prio int) (*Handle, func() error, error) {
			h, err := w.GlobalProcessSet().ReducescatterAsync(TensorOf([]float32{1, 1, 1}, 3), ReduceOptions{Op: Sum, Name: "prio.h", Priority: prio})
			return h, func() error { _, err := h.Wait(); return err }, err
		}},
		// Ranks disagree: rank 1 says 9, the others 0 — it runs first.
		{"prio.i", -1, allreduce("prio.i")},
	}
	each(t, ws, func(w *World) error {
		// A first round, so that every rank's cycle starts together.
		if _, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "warmup"}); err != nil {
			return err
		}
		var waits []func() error
		for k := range ops {
			o := ops[(k+w.Rank()*3)%len(ops)] // another arrival order on every rank
			prio := o.prio
			if o.name == "prio.i" {
				prio = 0
				if w.Rank() == 1 {
					prio = 9
				}
			}
			_, wait, err := o.run(w, prio)
			if err != nil {
				return fmt.Errorf("%s: %w", o.name, err)
			}
			waits = append(waits, wait)
		}
		for _, wait := range waits {
			if err := wait(); err != nil {
				return err
			}
		}
		return nil
	})
	ws[0].Close()
	got := executionOrder(t, path, "prio.")
	want := []string{"allreduce.prio.i", "allreduce.prio.c", "broadcast.prio.f", "allgather.prio.e",
		"reducescatter.prio.h", "allreduce.prio.a", "alltoall.prio.g", "allreduce.prio.b", "allreduce.prio.d"}
	if !slices.Equal(got, want) {
		t.Fatalf("execution order on rank 0:\n got %v\nwant %v (by priority, higher first)", got, want)
	}
}

// A priority the wire cannot carry is refused at the call, naming it.
func TestPriorityOutOfRange(t *testing.T) {
	ws := mustWorlds(t, 1, worldOpts{})
	g := ws[0].GlobalProcessSet()
	_, err := g.AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Priority: 1 << 40})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "priority 1099511627776") {
		t.Fatalf("allreduce: %v", err)
	}
	_, err = g.AllgatherAsync(TensorOf([]float32{1}), "x", Priority(-1<<40))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("allgather: %v", err)
	}
}

// AllreduceIntoDriving (the C ABI's synchronous allreduce): results are
// right whether the caller or the engine goroutine runs the round (which
// one depends on scheduling here, ranks being goroutines of one process;
// that a holder runs the round is tested in the engine package), a slow
// peer is waited for, and a set closed under a driving caller fails it
// instead of hanging.
func TestAllreduceIntoDriving(t *testing.T) {
	const n = 2
	ws := mustWorlds(t, n, worldOpts{env: map[string]string{"HVD_SPIN_US": "5000", "HVD_CALLER_ROUNDS": "1"}})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		for i := 0; i < 300; i++ {
			if w.Rank() == 1 && i == 7 {
				time.Sleep(200 * time.Millisecond) // rank 0's caller waits in its round
			}
			x := []float32{float32(w.Rank() + i)}
			if err := g.AllreduceIntoDriving(TensorOf(x), TensorOf(x), ReduceOptions{Op: Sum, Name: "drive"}); err != nil {
				return err
			}
			if want := float32(2*i + 1); x[0] != want {
				return fmt.Errorf("iteration %d: got %v, want %v", i, x[0], want)
			}
		}
		return nil
	})
	// Rank 1 never calls: rank 0's driving call waits in its round until
	// the set is closed under it.
	errc := make(chan error, 1)
	go func() {
		x := []float32{1}
		errc <- ws[0].GlobalProcessSet().AllreduceIntoDriving(TensorOf(x), TensorOf(x), ReduceOptions{Name: "drive.alone"})
	}()
	time.Sleep(100 * time.Millisecond)
	ws[0].Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("an allreduce whose peer never came succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a driving allreduce hung after its world was closed")
	}
}
