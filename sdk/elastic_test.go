package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/elastic"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The worker half of docs/elastic.md, with the test playing hvdrun's
// elastic driver: it writes elastic/assign.<N>, elastic/epoch and
// elastic/hosts_updated into a real rendezvous server, and runs the
// workers as goroutines (their worlds on a shared in-memory store).

type fakeDriver struct {
	t   *testing.T
	srv *rendezvous.Server
	c   *rendezvous.Client
	st  *backends.MemStore
}

func newFakeDriver(t *testing.T) *fakeDriver {
	srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	c := rendezvous.NewClient(rendezvous.ClientConfig{Addr: srv.Addr(), Timeout: 5 * time.Second})
	t.Cleanup(func() { c.Close(); srv.Close() })
	return &fakeDriver{t: t, srv: srv, c: c, st: backends.NewMemStore()}
}

// publish writes the world of epoch n: workers in rank order (all on one
// host), then moves elastic/epoch to n.
// From a goroutine other than the test's it must run while the test does
// (t.Error is safe there, t.Fatal is not).
func (d *fakeDriver) publish(n int, workers []string, removed []string) {
	if err := d.publishNoFail(n, workers, removed); err != nil {
		d.t.Error(err)
	}
}

// publishNoFail is publish for goroutines other than the test's.
func (d *fakeDriver) publishNoFail(n int, workers []string, removed []string) error {
	a := Assignment{Epoch: n, Size: len(workers), Workers: map[string]WorkerAssignment{}, Removed: removed}
	for r, wid := range workers {
		a.Workers[wid] = WorkerAssignment{Rank: r, Size: len(workers), LocalRank: r, LocalSize: len(workers), CrossSize: 1, Hostname: "h"}
	}
	b, _ := json.Marshal(a)
	ctx := context.Background()
	if err := d.c.Put(ctx, ElasticScope, "assign."+strconv.Itoa(n), b); err != nil {
		return err
	}
	return d.c.Put(ctx, ElasticScope, "epoch", []byte(strconv.Itoa(n)))
}

func (d *fakeDriver) hostsUpdated(seq int64, flags int) {
	if err := d.c.Put(context.Background(), ElasticScope, "hosts_updated", []byte(fmt.Sprintf("%d,%d", seq, flags))); err != nil {
		d.t.Error(err)
	}
}

// worker makes an elastic worker started into epoch first.
func (d *fakeDriver) worker(wid string, first int, cfg Config) *Worker {
	_, port, _ := strings.Cut(d.srv.Addr(), ":")
	env := map[string]string{
		"HOROVOD_ELASTIC": "1", "HVD_ELASTIC_WORKER_ID": wid, "HVD_RENDEZVOUS_EPOCH": strconv.Itoa(first),
		"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1", "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
		"HOROVOD_GLOO_RENDEZVOUS_PORT": port, "HOROVOD_ELASTIC_TIMEOUT": "20", "HOROVOD_GLOO_TIMEOUT_SECONDS": "10",
	}
	cfg.Getenv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg.Store = d.st
	cfg.HostKey = "host0"
	k, err := NewWorker(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { k.Close() })
	return k
}

// parallel runs f for every index at once; every wait is bounded.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		t.Fatalf("not finished within 40 s")
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
}

func initAll(t *testing.T, ks []*Worker) []*World {
	t.Helper()
	ws := make([]*World, len(ks))
	parallel(t, len(ks), func(i int) (err error) {
		ws[i], err = ks[i].Init(context.Background())
		return err
	})
	return ws
}

func mySegments() []string {
	m, _ := filepath.Glob(fmt.Sprintf("/dev/shm/hvd-%d-%d-*", os.Getuid(), os.Getpid()))
	return m
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// settle waits (bounded) until f reports true.
func settle(d time.Duration, f func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if f() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f()
}

// A world of 3 loses a worker; the survivors reset into epoch 1 with size
// 2: pending ops of the old world fail, the process sets are registered
// again by the rules (ids kept where the ranks exist, the others
// unregistered with an error naming them), the state is synced, the
// removed worker learns it is removed, and nothing of the old world is
// left (goroutines, descriptors, /dev/shm segments).
func TestElasticLoseRankAndReset(t *testing.T) {
	for _, backend := range []string{"shm", "tcp"} {
		t.Run(backend, func(t *testing.T) { testLoseRankAndReset(t, backend) })
	}
}

func testLoseRankAndReset(t *testing.T, backend string) {
	runtime.GC()
	baseG, baseFD := runtime.NumGoroutine(), openFDs()
	d := newFakeDriver(t)
	var logMu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		logMu.Lock()
		logs = append(logs, fmt.Sprintf(format, args...))
		logMu.Unlock()
	}
	wids := []string{"h:0", "h:1", "h:2"}
	ks := make([]*Worker, 3)
	for i, wid := range wids {
		ks[i] = d.worker(wid, 0, Config{
			ProcessSets: [][]int{{0, 2}},
			SetSpecs:    []SetSpec{{Name: "first two", Func: func(n int) []int { return []int{0, 1} }}},
			Dynamic:     true, Logf: logf, Backend: backend,
		})
	}
	d.publish(0, wids, nil)
	ws := initAll(t, ks)
	parallel(t, 3, func(i int) error {
		w := ws[i]
		if w.Size() != 3 || w.Rank() != i || ks[i].Epoch() != 0 {
			return fmt.Errorf("world %d of %d at epoch %d", w.Rank(), w.Size(), ks[i].Epoch())
		}
		if _, err := w.AddProcessSet([]int{1, 2}); err != nil {
			return err
		}
		last, err := w.AddProcessSetSpec(SetSpec{Name: "last", Func: func(n int) []int { return []int{n - 1} }})
		if err != nil {
			return err
		}
		var ids []int
		for _, ps := range w.ProcessSets() {
			ids = append(ids, ps.ID())
		}
		if !slices.Equal(ids, []int{0, 1, 2, 3, 4}) || !slices.Equal(last.Ranks(), []int{2}) {
			return fmt.Errorf("ids %v, last %v", ids, last.Ranks())
		}
		return nil
	})

	// Rank 0 has an op the others never submit: the reset must fail it.
	pending, err := ws[0].GlobalProcessSet().AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Name: "orphan"})
	if err != nil {
		t.Fatal(err)
	}
	// Worker h:2 dies.
	ks[2].Close()
	parallel(t, 2, func(i int) error {
		_, err := ws[i].GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "after.death"})
		if !IsInternalError(err) {
			return fmt.Errorf("an allreduce with a dead peer: %v", err)
		}
		return nil
	})
	d.publish(1, wids[:2], []string{"h:2"})
	for _, k := range ks[:2] {
		if err := k.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() { _, err := pending.Wait(); waited <- err }()
	select {
	case err := <-waited:
		if !IsInternalError(err) {
			t.Fatalf("a pending op of the old world: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a pending op of the old world still waits 10 s after the reset")
	}
	ws = initAll(t, ks[:2])
	parallel(t, 2, func(i int) error {
		w := ws[i]
		if w.Size() != 2 || w.Rank() != i || ks[i].Epoch() != 1 {
			return fmt.Errorf("world %d of %d at epoch %d", w.Rank(), w.Size(), ks[i].Epoch())
		}
		got := map[int][]int{}
		for _, ps := range w.ProcessSets() {
			got[ps.ID()] = ps.Ranks()
		}
		want := map[int][]int{0: {0, 1}, 2: {0, 1}, 4: {1}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("sets after the reset: %v, want %v", got, want)
		}
		for id, ranks := range map[int]string{1: "[0 2]", 3: "[1 2]"} {
			_, err := w.ProcessSet(id)
			if !errors.Is(err, ErrSetUnregistered) || !errors.Is(err, ErrUnknownSet) || !strings.Contains(err.Error(), ranks) || !strings.Contains(err.Error(), "rank 2 does not exist") {
				return fmt.Errorf("set %d: %v", id, err)
			}
		}
		two, _ := w.ProcessSet(2)
		v := TensorOf([]int32{int32(10 + i)})
		if err := two.AllreduceInPlace(v, ReduceOptions{Op: Sum, Name: "two"}); err != nil || SliceOf[int32](v)[0] != 21 {
			return fmt.Errorf("allreduce on set 2: %v %v", err, SliceOf[int32](v))
		}
		// The oldest freed id is reused.
		ps, err := w.AddProcessSet([]int{0})
		if err != nil || ps.ID() != 1 {
			return fmt.Errorf("add after the reset: id %d, %v", ps.ID(), err)
		}
		// State from the new rank 0.
		step, name := 3+4*i, fmt.Sprint("rank", i)
		st := NewObjectState(map[string]any{"step": &step, "name": &name})
		if err := syncState(w, st, false); err != nil {
			return err
		}
		if step != 3 || name != "rank0" {
			return fmt.Errorf("synced state: %d %q", step, name)
		}
		return nil
	})
	logMu.Lock()
	warned := strings.Join(logs, "\n")
	logMu.Unlock()
	if !strings.Contains(warned, "process set 1 [0 2]") || !strings.Contains(warned, "unregistered in the world of epoch 1 (2 ranks)") {
		t.Errorf("no warning for the unregistered sets: %s", warned)
	}
	// The removed worker is told so.
	if _, err := ks[2].Init(context.Background()); !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), "h:2") {
		t.Errorf("removed worker: %v", err)
	}
	for _, k := range ks {
		k.Close()
	}
	d.c.Close()
	if !settle(10*time.Second, func() bool { return runtime.NumGoroutine() <= baseG+2 }) {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", baseG, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}
	if segs := mySegments(); len(segs) > 0 {
		t.Errorf("segments left: %v", segs)
	}
	// The fake driver's server is still up (its listener, and the idle
	// connections it may keep): allow a few.
	if !settle(5*time.Second, func() bool { return openFDs() <= baseFD+4 }) {
		t.Errorf("descriptors: %d before, %d after", baseFD, openFDs())
	}
}

// Run restores the last commit on a peer failure, resets and goes on; the
// counters continue from the last commit and every rank holds the same.
func TestElasticRunRestoresAndResets(t *testing.T) {
	d := newFakeDriver(t)
	wids := []string{"h:0", "h:1", "h:2"}
	ks := make([]*Worker, 3)
	for i, wid := range wids {
		ks[i] = d.worker(wid, 0, Config{Logf: t.Logf})
	}
	d.publish(0, wids, nil)
	errDead := errors.New("worker killed")
	type result struct {
		epoch, batch, resets, resumedAt int
	}
	results := make([]result, 3)
	parallel(t, 3, func(i int) error {
		k := ks[i]
		batch := 0
		st := NewObjectState(map[string]any{"batch": &batch})
		resets, resumedAt := 0, -1
		k.RegisterResetCallbacks(func() { resets++ })
		err := k.Run(st, func(w *World) error {
			if k.Epoch() == 1 && resumedAt < 0 {
				resumedAt = batch
			}
			for batch < 10 {
				if i == 2 && batch == 5 {
					k.Close() // dies without a word
					return errDead
				}
				batch++ // not committed before the allreduce: rolled back if it fails
				v := TensorOf([]int32{1})
				if err := w.GlobalProcessSet().AllreduceInPlace(v, ReduceOptions{Op: Sum, Name: "step"}); err != nil {
					return err
				}
				if SliceOf[int32](v)[0] != int32(w.Size()) {
					return fmt.Errorf("sum %d in a world of %d", SliceOf[int32](v)[0], w.Size())
				}
				if err := k.Commit(st); err != nil {
					return err
				}
			}
			return nil
		})
		if i == 2 {
			if !errors.Is(err, errDead) {
				return fmt.Errorf("the dying worker's Run: %v", err)
			}
			d.publish(1, wids[:2], []string{"h:2"})
			return nil
		}
		results[i] = result{k.Epoch(), batch, resets, resumedAt}
		return err
	})
	// The survivors saw h:2 close its communicator (on purpose, for all
	// they know): each reports that it resets, naming nobody.
	for _, r := range wids[:2] {
		if v, ok, err := d.c.TryGet(context.Background(), ElasticScope, FailedKey(0, r)); err != nil || !ok || len(v) != 0 {
			t.Errorf("%s: %q (%v, %v), want an empty report", FailedKey(0, r), v, ok, err)
		}
	}
	if _, ok, _ := d.c.TryGet(context.Background(), ElasticScope, FailedKey(0, "h:2")); ok {
		t.Errorf("the dying worker reported")
	}
	for i, r := range results[:2] {
		if r != (result{1, 10, 1, 5}) {
			t.Errorf("worker %d: %+v, want epoch 1, batch 10, one reset, resumed at the last commit (5)", i, r)
		}
	}
}

// A host update interrupts every rank at the same commit; the new worker
// joins the next world and gets rank 0's state. An update that the world
// already reflects does not interrupt again.
func TestElasticHostsUpdated(t *testing.T) {
	d := newFakeDriver(t)
	ks := []*Worker{d.worker("h:0", 0, Config{}), d.worker("h:1", 0, Config{})}
	d.publish(0, []string{"h:0", "h:1"}, nil)
	d.hostsUpdated(1, 2) // before the world: never an interrupt
	var once sync.Once
	out := make([][3]int, 3)
	parallel(t, 3, func(i int) error {
		if i == 2 {
			// Started by the driver for the world of epoch 1.
			select {
			case <-time.After(20 * time.Second):
				return errors.New("epoch 1 never published")
			case <-waitEpoch(d, 1):
			}
			return runCounting(d.worker("h:2", 1, Config{}), i, out)
		}
		return runCounting(ks[i], i, out, func(step int) {
			if step == 3 {
				once.Do(func() {
					d.publish(1, []string{"h:0", "h:1", "h:2"}, nil)
					d.hostsUpdated(2, 2)
				})
			}
		})
	})
	for i, o := range out {
		if o != [3]int{1, 6, 3} {
			t.Errorf("worker %d: epoch %d, step %d, world size %d; want 1, 6, 3", i, o[0], o[1], o[2])
		}
	}
}

func waitEpoch(d *fakeDriver, n int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		d.c.Get(ctx, ElasticScope, "assign."+strconv.Itoa(n))
	}()
	return ch
}

// runCounting runs 6 committed steps; hook sees each step on rank 0.
func runCounting(k *Worker, i int, out [][3]int, hook ...func(int)) error {
	step := 0
	st := NewObjectState(map[string]any{"step": &step})
	err := k.Run(st, func(w *World) error {
		for step < 6 {
			if len(hook) > 0 && w.Rank() == 0 {
				hook[0](step)
			}
			v := TensorOf([]int32{1})
			if err := w.GlobalProcessSet().AllreduceInPlace(v, ReduceOptions{Op: Sum, Name: "s"}); err != nil {
				return err
			}
			step++
			if err := k.Commit(st); err != nil {
				return err
			}
		}
		out[i] = [3]int{k.Epoch(), step, w.Size()}
		return nil
	})
	return err
}

// A world that cannot form (a worker never comes) is left as soon as the
// driver publishes a newer one.
func TestElasticInitMovesToNewerEpoch(t *testing.T) {
	d := newFakeDriver(t)
	ks := []*Worker{d.worker("h:0", 0, Config{}), d.worker("h:1", 0, Config{})}
	d.publish(0, []string{"h:0", "h:1", "h:ghost"}, nil)
	published := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		published <- d.publishNoFail(1, []string{"h:1", "h:0"}, []string{"h:ghost"})
	}()
	t.Cleanup(func() { <-published })
	start := time.Now()
	ws := initAll(t, ks)
	if ws[0].Rank() != 1 || ws[1].Rank() != 0 || ks[0].Epoch() != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("ranks %d %d at epoch %d after %v", ws[0].Rank(), ws[1].Rank(), ks[0].Epoch(), time.Since(start))
	}
}

// Errors that say what to do: no worker id, no assignment in time.
func TestElasticBadSetup(t *testing.T) {
	if _, err := NewWorker(Config{Getenv: func(k string) (string, bool) {
		return map[string]string{"HOROVOD_ELASTIC": "1"}[k], k == "HOROVOD_ELASTIC"
	}}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "HVD_ELASTIC_WORKER_ID") {
		t.Errorf("no worker id: %v", err)
	}
	d := newFakeDriver(t)
	k := d.worker("h:0", 0, Config{})
	k.core.SetTimeouts(300*time.Millisecond, -1, 0)
	if _, err := k.Init(context.Background()); err == nil || !strings.Contains(err.Error(), "assign.0") || !strings.Contains(err.Error(), "HOROVOD_ELASTIC_TIMEOUT") {
		t.Errorf("no assignment: %v", err)
	}
	// A world whose other worker never joins, and no newer world: the
	// error says what the others must do.
	k = d.worker("h:1", 0, Config{})
	k.core.SetTimeouts(300*time.Millisecond, 300*time.Millisecond, -1)
	d.publish(0, []string{"h:1", "h:never"}, nil)
	start := time.Now()
	if _, err := k.Init(context.Background()); err == nil || !strings.Contains(err.Error(), "state.commit()") || time.Since(start) > 5*time.Second {
		t.Errorf("a world that cannot form: %v after %v", err, time.Since(start))
	}
}

// The wait for an assignment outlasts HOROVOD_ELASTIC_TIMEOUT by the
// grace: the driver, waiting up to the same timeout for slots, gives its
// verdict first (a worker that gave up first made "too few slots" look
// like "every worker failed").
func TestElasticAssignWaitOutlastsTimeout(t *testing.T) {
	d := newFakeDriver(t)
	k := d.worker("h:0", 0, Config{})
	k.core.SetTimeouts(200*time.Millisecond, -1, 5*time.Second)
	published := make(chan struct{})
	go func() {
		// No t.Fatal here: publish may run after a failed Init ended the
		// test; it reports through the channel the test waits on.
		defer close(published)
		time.Sleep(600 * time.Millisecond)
		d.publishNoFail(0, []string{"h:0"}, nil)
	}()
	w, err := k.Init(context.Background())
	<-published
	if err != nil {
		t.Fatalf("Init after the timeout, within the grace: %v", err)
	}
	k.Close()
	_ = w
	if AssignGrace < 5*time.Second {
		t.Errorf("AssignGrace = %v: too short to let the driver speak first", AssignGrace)
	}
}

// A worker that joins later learns the job's sets from rank 0: its static
// specs keep their ids (a function is evaluated for the new size), the
// dynamic sets it never added are registered with the ids the others use,
// and collectives on them include it.
func TestElasticNewWorkerAdoptsSets(t *testing.T) {
	d := newFakeDriver(t)
	cfg := func() Config {
		return Config{Dynamic: true, Logf: t.Logf, SetSpecs: []SetSpec{
			{Name: "odd", Func: func(n int) []int {
				var out []int
				for r := 1; r < n; r += 2 {
					out = append(out, r)
				}
				return out
			}},
			{Ranks: []int{2}}, // cannot exist in the first world of 2
		}}
	}
	ks := []*Worker{d.worker("h:0", 0, cfg()), d.worker("h:1", 0, cfg())}
	d.publish(0, []string{"h:0", "h:1"}, nil)
	ws := initAll(t, ks)
	parallel(t, 2, func(i int) error {
		if id := ws[i].StaticProcessSetID(1); id != -1 {
			return fmt.Errorf("static set [2] in a world of 2: id %d", id)
		}
		ps, err := ws[i].AddProcessSet([]int{0})
		if err != nil || ps.ID() != 2 {
			return fmt.Errorf("dynamic add: %v %v", ps, err)
		}
		return nil
	})
	for _, k := range ks {
		k.Shutdown()
	}
	d.publish(1, []string{"h:0", "h:1", "h:2"}, nil)
	var logMu sync.Mutex
	var logs []string
	late := cfg()
	late.Logf = func(format string, args ...any) {
		logMu.Lock()
		logs = append(logs, fmt.Sprintf(format, args...))
		logMu.Unlock()
	}
	ks = append(ks, d.worker("h:2", 1, late))
	defer func() {
		logMu.Lock()
		defer logMu.Unlock()
		if s := strings.Join(logs, "\n"); !strings.Contains(s, "static process set #2") || !strings.Contains(s, "rank 0 has not") {
			t.Errorf("the late worker's warning about static set [2]: %q", s)
		}
	}()
	ws = initAll(t, ks)
	parallel(t, 3, func(i int) error {
		w := ws[i]
		got := map[int][]int{}
		for _, ps := range w.ProcessSets() {
			got[ps.ID()] = ps.Ranks()
		}
		if want := map[int][]int{0: {0, 1, 2}, 1: {1}, 2: {0}}; fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("worker %d: sets %v, want %v", i, got, want)
		}
		if w.StaticProcessSetID(0) != 1 || w.StaticProcessSetID(1) != -1 {
			return fmt.Errorf("worker %d: static ids %d %d", i, w.StaticProcessSetID(0), w.StaticProcessSetID(1))
		}
		// The next dynamic id is the same everywhere.
		ps, err := w.AddProcessSet([]int{0, 2})
		if err != nil || ps.ID() != 3 {
			return fmt.Errorf("worker %d: add: %v %v", i, ps, err)
		}
		if ps.Included() {
			v := TensorOf([]int32{1})
			if err := ps.AllreduceInPlace(v, ReduceOptions{Op: Sum}); err != nil || SliceOf[int32](v)[0] != 2 {
				return fmt.Errorf("worker %d: allreduce on %v: %v", i, ps, err)
			}
		}
		return nil
	})
}

// The process-wide API: Init in an elastic worker joins the assigned world,
// Run resets it into the next one (Current follows), Shutdown and Init
// again join the world after.
func TestElasticPackageLevel(t *testing.T) {
	d := newFakeDriver(t)
	k := d.worker("h:0", 0, Config{}) // for its configuration only
	cfg := k.cfg
	t.Cleanup(func() {
		Shutdown()
		globalMu.Lock()
		if elasticWorker != nil {
			elasticWorker.Close()
		}
		elasticWorker = nil
		globalMu.Unlock()
	})
	d.publish(0, []string{"h:0"}, nil)
	if err := Init(cfg); err != nil {
		t.Fatal(err)
	}
	if w, err := Current(); err != nil || w.Identity().Epoch != 0 || ElasticWorker() == nil {
		t.Fatalf("after Init: %v %v", w, err)
	}
	calls := 0
	v := 0
	st := NewObjectState(map[string]any{"v": &v})
	err := Run(st, func(w *World) error {
		calls++
		if cur, _ := Current(); cur != w {
			return fmt.Errorf("Current is not the world Run passes")
		}
		if calls == 1 {
			v = 1
			if err := ElasticWorker().Commit(st); err != nil {
				return err
			}
			v = 2 // not committed
			d.publish(1, []string{"h:0"}, nil)
			return fmt.Errorf("a collective failed: %w", ErrPeerFailure)
		}
		if w.Identity().Epoch != 1 || v != 1 {
			return fmt.Errorf("after the reset: epoch %d, v %d (want 1, 1)", w.Identity().Epoch, v)
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("Run: %v after %d calls", err, calls)
	}
	Shutdown()
	d.publish(2, []string{"h:0"}, nil)
	if err := Init(Config{}); err != nil {
		t.Fatal(err)
	}
	if w, _ := Current(); w.Identity().Epoch != 2 {
		t.Fatalf("Init after Shutdown joined epoch %d, want 2", w.Identity().Epoch)
	}
}

// A survivor whose collective failed naming a peer reports that peer's
// worker id to the driver (elastic/failed.<N>.<reporter>) when it resets;
// the peer here hangs alive (a host cut off from the network), so only the
// report lets the driver move on. The failure is injected into the
// survivors' engines as the backends report a peer that went silent.
func TestElasticReportsFailedPeer(t *testing.T) {
	d := newFakeDriver(t)
	wids := []string{"h:0", "h:1", "h:2"}
	ks := make([]*Worker, 3)
	for i, wid := range wids {
		ks[i] = d.worker(wid, 0, Config{Logf: t.Logf})
	}
	d.publish(0, wids, nil)
	initAll(t, ks)
	silent := &backends.PeerError{Peer: 2, Global: 2, Op: "allreduce", Err: errors.New("timed out after 4s waiting for data")}
	parallel(t, 3, func(i int) error {
		k := ks[i]
		errGone := errors.New("h:2 gone")
		n := 0
		err := k.Run(NewObjectState(map[string]any{"n": &n}), func(w *World) error {
			if k.Epoch() == 1 {
				return nil
			}
			if i == 2 {
				// Hangs in the step, reporting nothing, until the driver
				// has both reports and publishes the next world without it.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for _, r := range wids[:2] {
					if _, err := d.c.Get(ctx, ElasticScope, FailedKey(0, r)); err != nil {
						return fmt.Errorf("no report by %s: %v", r, err)
					}
				}
				if err := d.publishNoFail(1, wids[:2], []string{"h:2"}); err != nil {
					return err
				}
				return errGone
			}
			// What a collective returns when h:2 went silent (the tcp
			// backend's timeout): h:2 never joins a step here.
			return fmt.Errorf("hvd: allreduce on process set 0 [0 1 2]: %w", silent)
		})
		if i == 2 && errors.Is(err, errGone) {
			return nil
		}
		return err
	})
	for _, r := range wids[:2] {
		v, ok, err := d.c.TryGet(context.Background(), ElasticScope, FailedKey(0, r))
		if err != nil || !ok || string(v) != "h:2" {
			t.Errorf("%s: report %q (%v, %v), want h:2", FailedKey(0, r), v, ok, err)
		}
	}
	if _, ok, _ := d.c.TryGet(context.Background(), ElasticScope, FailedKey(0, "h:2")); ok {
		t.Errorf("the hung worker reported")
	}
	if _, ok, _ := d.c.TryGet(context.Background(), ElasticScope, FailedKey(1, "h:0")); ok {
		t.Errorf("a report about the world of epoch 1, which ended well")
	}
}

// peerCulprit is the protocol's rule (sdk/elastic), tested here on the
// sdk's errors.
var peerCulprit = elastic.PeerCulprit

func TestPeerCulprit(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, -1},
		{errors.New("x"), -1},
		{ErrShutdown, -1},
		{&backends.PeerError{Peer: 1, Global: 5, Err: errors.New("i/o timeout")}, 5},
		{fmt.Errorf("hvd: engine: message from set rank 1: %w", &backends.PeerError{Peer: 1, Global: -1, Err: errors.New("i/o timeout")}), 7},
		{&backends.PeerError{Peer: 1, Global: 5, Err: errors.New("it stopped: hvd: allreduce: rank 2: i/o timeout")}, -1},
		{&backends.PeerError{Peer: 1, Global: 5, Err: errors.New("it stopped: rank 1 closed the communicator (shut down)")}, -1},
		{&backends.PeerError{Peer: 1, Global: 5, Err: errors.New("closed the communicator (shut down)")}, -1},
		{&backends.PeerError{Peer: 1, Global: 5, Err: errors.New("process exited")}, 5},
		{&backends.PeerError{Peer: -1, Global: -1, Err: errors.New("i/o timeout")}, -1},
	} {
		got, ok := peerCulprit(c.err, []int{3, 7})
		if !ok {
			got = -1
		}
		if got != c.want {
			t.Errorf("peerCulprit(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
