package sdk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// testEnv are settings every world of a test run starts with unless the
// test sets them: HVD_SDK_TEST_ENV="HVD_BACKEND=tcp,HVD_TCP_FULL_MESH_MAX=2"
// runs the tests on another configuration.
var testEnv = func() map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(os.Getenv("HVD_SDK_TEST_ENV"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}()

type worldOpts struct {
	sets    func(rank int) [][]int
	hostKey func(rank int) string
	env     map[string]string
	logf    func(format string, args ...any)
}

// startWorlds starts n ranks as goroutines on a shared in-memory store and
// returns their Worlds (nil where Start failed) and errors.
func startWorlds(t testing.TB, n int, o worldOpts) ([]*World, []error) {
	t.Helper()
	st := backends.NewMemStore()
	ws := make([]*World, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{
				Identity: &rendezvous.Identity{Rank: r, Size: n, Hostname: "h", Timeout: 10 * time.Second},
				Store:    st,
				HostKey:  "host0",
				Getenv: func(k string) (string, bool) {
					if v, ok := o.env[k]; ok {
						return v, true
					}
					v, ok := testEnv[k]
					return v, ok
				},
				Logf: o.logf,
			}
			if o.sets != nil {
				cfg.ProcessSets = o.sets(r)
			}
			if o.hostKey != nil {
				cfg.HostKey = o.hostKey(r)
			}
			ws[r], errs[r] = Start(context.Background(), cfg)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, w := range ws {
			if w != nil {
				w.Close()
			}
		}
	})
	return ws, errs
}

func mustWorlds(t *testing.T, n int, o worldOpts) []*World {
	t.Helper()
	ws, errs := startWorlds(t, n, o)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Start: %v", r, err)
		}
	}
	return ws
}

// each runs f on every rank concurrently and fails the test on errors. If
// some rank does not finish (a rank that returned early can leave the
// others waiting for it), the errors of the finished ranks are reported
// instead of hanging.
func each(t *testing.T, ws []*World, f func(w *World) error) {
	t.Helper()
	errs := make([]error, len(ws))
	done := make([]bool, len(ws))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f(w)
			mu.Lock()
			errs[r], done[r] = err, true
			mu.Unlock()
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		for r := range ws {
			if !done[r] {
				t.Errorf("rank %d did not finish within 30 s", r)
			}
		}
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() && !isDone(finished) {
		t.FailNow()
	}
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestAverageAndScaling(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		r := float32(w.Rank())
		in := TensorOf([]float32{r, 2 * r, 1})
		out, err := w.GlobalProcessSet().Allreduce(in, ReduceOptions{})
		if err != nil {
			return err
		}
		if got := SliceOf[float32](out); !slices.Equal(got, []float32{1, 2, 1}) {
			return fmt.Errorf("average: %v", got)
		}
		if SliceOf[float32](in)[0] != r {
			return errors.New("Allreduce modified its input")
		}
		out, err = w.GlobalProcessSet().Allreduce(in, ReduceOptions{Op: Sum, Prescale: 2, Postscale: 0.5})
		if err != nil {
			return err
		}
		if got := SliceOf[float32](out); !slices.Equal(got, []float32{3, 6, 3}) {
			return fmt.Errorf("sum with scales: %v", got)
		}
		// Integer Average is Sum·(1/n) truncated toward zero: 4/3 → 1, -4/3 → -1.
		two := int32(1)
		if w.Rank() == 2 {
			two = 2
		}
		ints := TensorOf([]int32{int32(w.Rank()), -1, 7, two, -two})
		if err := w.GlobalProcessSet().AllreduceInPlace(ints, ReduceOptions{}); err != nil {
			return err
		}
		if got := SliceOf[int32](ints); !slices.Equal(got, []int32{1, -1, 7, 1, -1}) {
			return fmt.Errorf("int average: %v", got)
		}
		mx := TensorOf([]float64{float64(w.Rank()), math.Inf(-1)})
		if err := w.GlobalProcessSet().AllreduceInPlace(mx, ReduceOptions{Op: Max}); err != nil {
			return err
		}
		if got := SliceOf[float64](mx); got[0] != 2 || !math.IsInf(got[1], -1) {
			return fmt.Errorf("max: %v", got)
		}
		return nil
	})
}

func TestAllgatherVariableDim0AndMismatch(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		r := w.Rank()
		rows := make([]int64, 2*(r+1))
		for i := range rows {
			rows[i] = int64(100*r + i)
		}
		out, err := w.GlobalProcessSet().Allgather(TensorOf(rows, int64(r+1), 2))
		if err != nil {
			return err
		}
		if !slices.Equal(out.Shape, []int64{6, 2}) {
			return fmt.Errorf("shape %v", out.Shape)
		}
		want := []int64{0, 1, 100, 101, 102, 103, 200, 201, 202, 203, 204, 205}
		if got := SliceOf[int64](out); !slices.Equal(got, want) {
			return fmt.Errorf("got %v", got)
		}
		// Rank 2 disagrees on the second dimension: everyone fails, told who.
		cols := int64(2)
		if r == 2 {
			cols = 3
		}
		_, err = w.GlobalProcessSet().Allgather(TensorOf(make([]float32, cols), 1, cols))
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "ranks 0, 1 have [* 2], rank 2 has [* 3]") {
			return fmt.Errorf("mismatch error: %v", err)
		}
		return nil
	})
}

func TestBroadcastRootIsGlobalRank(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{sets: func(int) [][]int { return [][]int{{1, 2}} }})
	each(t, ws, func(w *World) error {
		ps, err := w.ProcessSet(1)
		if err != nil {
			return err
		}
		buf := TensorOf([]int32{int32(w.Rank()), 5})
		err = ps.Broadcast(buf, 2)
		if w.Rank() == 0 {
			if !errors.Is(err, ErrNotMember) || !strings.Contains(err.Error(), "rank 0 is not a member of process set 1 [1 2]") {
				return fmt.Errorf("non-member: %v", err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if got := SliceOf[int32](buf); got[0] != 2 {
			return fmt.Errorf("got %v", got)
		}
		if err := ps.Broadcast(buf, 0); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "invalid root rank 0") {
			return fmt.Errorf("root outside set: %v", err)
		}
		return nil
	})
}

func TestAlltoallSplits(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		r := int32(w.Rank())
		// rank r sends j+1 rows to rank j, each row = [r, j]
		splits := []int32{1, 2, 3}
		var data []int32
		for j, s := range splits {
			for k := int32(0); k < s; k++ {
				data = append(data, r, int32(j))
			}
		}
		data = append(data, -9, -9) // an extra row that is not sent
		out, recv, err := w.GlobalProcessSet().Alltoall(TensorOf(data, int64(len(data)/2), 2), splits)
		if err != nil {
			return err
		}
		if want := []int32{r + 1, r + 1, r + 1}; !slices.Equal(recv, want) {
			return fmt.Errorf("received splits %v, want %v", recv, want)
		}
		got := SliceOf[int32](out)
		if out.Shape[0] != int64(3*(r+1)) {
			return fmt.Errorf("shape %v", out.Shape)
		}
		for i := 0; i < len(got); i += 2 {
			src := int32(i / 2 / int(r+1))
			if got[i] != src || got[i+1] != r {
				return fmt.Errorf("row %d = %v", i/2, got[i:i+2])
			}
		}
		if _, _, err := w.GlobalProcessSet().Alltoall(TensorOf([]int32{1, 2}), nil); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("indivisible: %v", err)
		}
		if _, _, err := w.GlobalProcessSet().Alltoall(TensorOf([]int32{1, 2}), []int32{1, 1, 1}); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("too many rows: %v", err)
		}
		return nil
	})
}

func TestReducescatterRowSplit(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		// 7 rows of 2: ranks get 3, 2, 2 rows.
		data := make([]float64, 14)
		for i := range data {
			data[i] = float64(i)
		}
		out, err := w.GlobalProcessSet().Reducescatter(TensorOf(data, 7, 2), ReduceOptions{Op: Sum})
		if err != nil {
			return err
		}
		first := []int{0, 3, 5}[w.Rank()]
		rows := []int64{3, 2, 2}[w.Rank()]
		if !slices.Equal(out.Shape, []int64{rows, 2}) {
			return fmt.Errorf("shape %v", out.Shape)
		}
		for i, v := range SliceOf[float64](out) {
			if v != 3*float64(2*first+i) {
				return fmt.Errorf("element %d = %v", i, v)
			}
		}
		avg, err := w.GlobalProcessSet().Reducescatter(TensorOf(data, 7, 2), ReduceOptions{})
		if err != nil {
			return err
		}
		if SliceOf[float64](avg)[0] != float64(2*first) {
			return fmt.Errorf("average: %v", SliceOf[float64](avg))
		}
		if _, err := w.GlobalProcessSet().Reducescatter(TensorOf(data), ReduceOptions{Op: Max}); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("max: %v", err)
		}
		return nil
	})
}

func TestProcessSetsExcludeRanks(t *testing.T) {
	ws := mustWorlds(t, 4, worldOpts{sets: func(int) [][]int { return [][]int{{2, 0}, {1, 3}, {0, 1, 3}} }})
	each(t, ws, func(w *World) error {
		sets := w.ProcessSets()
		if len(sets) != 4 || !slices.Equal(sets[1].Ranks(), []int{0, 2}) || sets[3].Size() != 3 {
			return fmt.Errorf("sets %v", sets)
		}
		for _, ps := range sets[1:] {
			v := TensorOf([]int64{int64(w.Rank())})
			err := ps.AllreduceInPlace(v, ReduceOptions{Op: Sum})
			if !ps.Included() {
				if !errors.Is(err, ErrNotMember) {
					return fmt.Errorf("%v: non-member got %v", ps, err)
				}
				if _, err := ps.Rank(); !errors.Is(err, ErrNotMember) {
					return fmt.Errorf("Rank on non-member: %v", err)
				}
				continue
			}
			if err != nil {
				return err
			}
			want := int64(0)
			for _, r := range ps.Ranks() {
				want += int64(r)
			}
			if SliceOf[int64](v)[0] != want {
				return fmt.Errorf("%v: sum %d, want %d", ps, SliceOf[int64](v)[0], want)
			}
		}
		if _, err := w.ProcessSet(9); !errors.Is(err, ErrUnknownSet) {
			return fmt.Errorf("unknown set: %v", err)
		}
		return nil
	})
}

func TestProcessSetValidation(t *testing.T) {
	for name, sets := range map[string][][]int{
		"out of range":     {{0, 5}},
		"negative":         {{-1, 0}},
		"duplicate rank":   {{0, 0, 1}},
		"duplicate set":    {{0, 1}, {1, 0}},
		"duplicate global": {{0, 1, 2}},
		"empty":            {{}},
	} {
		_, err := normaliseSets(sets, 3)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	if got, err := normaliseSets([][]int{{2, 0}}, 3); err != nil || !slices.Equal(got[0], []int{0, 2}) {
		t.Errorf("sorting: %v %v", got, err)
	}
}

func TestProcessSetMismatchFailsEveryRank(t *testing.T) {
	_, errs := startWorlds(t, 3, worldOpts{sets: func(r int) [][]int {
		if r == 2 {
			return [][]int{{1, 2}, {0, 1}}
		}
		return [][]int{{0, 1}, {1, 2}}
	}})
	for r, err := range errs {
		if !errors.Is(err, ErrProcessSetMismatch) || !strings.Contains(err.Error(), "rank 2 registered [[1 2] [0 1]]") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestTopologyFromHostKeys(t *testing.T) {
	// 3 ranks on 2 fake hosts, interleaved: a b a
	ws := mustWorlds(t, 3, worldOpts{hostKey: func(r int) string { return []string{"a", "b", "a"}[r] }})
	want := [][4]int{{0, 2, 0, 2}, {0, 1, 1, 2}, {1, 2, 0, 1}}
	for r, w := range ws {
		got := [4]int{w.LocalRank(), w.LocalSize(), w.CrossRank(), w.CrossSize()}
		if got != want[r] {
			t.Errorf("rank %d: local/cross = %v, want %v", r, got, want[r])
		}
		if w.IsHomogeneous() {
			t.Errorf("rank %d: 2+1 ranks is not homogeneous", r)
		}
	}
}

func TestSendRecvGlobalRanks(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{sets: func(int) [][]int { return [][]int{{0, 2}} }})
	each(t, ws, func(w *World) error {
		ps, _ := w.ProcessSet(1)
		switch w.Rank() {
		case 0:
			return ps.Send(TensorOf([]float32{1, 2, 3}), 2, 9)
		case 2:
			buf := make([]float32, 3)
			if err := ps.Recv(TensorOf(buf), 0, 9); err != nil {
				return err
			}
			if !slices.Equal(buf, []float32{1, 2, 3}) {
				return fmt.Errorf("got %v", buf)
			}
		}
		return nil
	})
}

func TestUseAfterCloseAndReinit(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{})
	ps := ws[0].GlobalProcessSet()
	ws[0].Close()
	if err := ps.Barrier(); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("after close: %v", err)
	}
	// Package-level lifecycle in one process (single rank).
	if _, err := Current(); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("before Init: %v", err)
	}
	cfg := Config{Getenv: func(string) (string, bool) { return "", false }}
	for round := 0; round < 2; round++ {
		if err := Init(cfg); err != nil {
			t.Fatal(err)
		}
		if err := Init(cfg); err != nil { // harmless while initialised
			t.Fatal(err)
		}
		g, err := GlobalProcessSet()
		if err != nil {
			t.Fatal(err)
		}
		v := TensorOf([]float32{3})
		if err := g.AllreduceInPlace(v, ReduceOptions{}); err != nil || SliceOf[float32](v)[0] != 3 {
			t.Fatalf("round %d: %v %v", round, err, v)
		}
		if err := Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := g.Barrier(); !errors.Is(err, ErrNotInitialized) {
			t.Fatalf("after Shutdown: %v", err)
		}
	}
}

func TestBadTensors(t *testing.T) {
	ws := mustWorlds(t, 1, worldOpts{})
	g := ws[0].GlobalProcessSet()
	bad := Tensor{Data: make([]byte, 7), DType: Float32, Shape: []int64{2}}
	if err := g.AllreduceInPlace(bad, ReduceOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("shape/data mismatch: %v", err)
	}
	if _, err := g.Allgather(Tensor{Data: make([]byte, 4), DType: Float32}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("0-dim allgather: %v", err)
	}
	if err := g.AllreduceInPlace(TensorOf([]int32{1}), ReduceOptions{Op: Adasum}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("adasum of int32: %v", err) // floating types only (adasum_test.go has the rest)
	}
}
