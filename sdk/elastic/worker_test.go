package elastic

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/internal/elasticproto"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The protocol without the sdk: a driver played on an in-memory Store, and
// worlds that are fakes (World), so that every decision of the worker is
// seen from its keys and its Join calls alone.

type memStore struct {
	mu   sync.Mutex
	kv   map[string][]byte
	puts []string
}

func newMemStore() *memStore { return &memStore{kv: map[string][]byte{}} }

func (s *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		if v, ok, _ := s.TryGet(ctx, key); ok {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *memStore) TryGet(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[key]
	return v, ok, nil
}

func (s *memStore) Put(_ context.Context, key string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv[key] = v
	s.puts = append(s.puts, key+"="+string(v))
	return nil
}

// publish writes the world of epoch n (workers in rank order), then epoch.
func (s *memStore) publish(n int, workers []string, removed []string) {
	a := Assignment{Epoch: n, Size: len(workers), Workers: map[string]WorkerAssignment{}, Removed: removed}
	for r, wid := range workers {
		a.Workers[wid] = WorkerAssignment{Rank: r, Size: len(workers), LocalRank: r, LocalSize: len(workers), CrossSize: 1, Hostname: "h" + strconv.Itoa(r)}
	}
	s.Put(context.Background(), elasticproto.AssignKey(n), a.JSON())
	s.Put(context.Background(), elasticproto.EpochKey, elasticproto.EncodeEpoch(n))
}

type fakeWorld struct {
	id       rendezvous.Identity
	closed   bool
	failures []SetFailure
	sent     [][]int64
	bcast    func(msg []int64) // what the broadcast gives this rank
}

func (w *fakeWorld) Rank() int              { return w.id.Rank }
func (w *fakeWorld) Closed() bool           { return w.closed }
func (w *fakeWorld) Close() error           { w.closed = true; return nil }
func (w *fakeWorld) Failures() []SetFailure { return w.failures }
func (w *fakeWorld) Logf(string, ...any)    {}
func (w *fakeWorld) Broadcast(msg []int64, _ string) error {
	w.sent = append(w.sent, append([]int64(nil), msg...))
	if w.bcast != nil {
		w.bcast(msg)
	}
	return nil
}

func newTestWorker(t *testing.T, st *memStore, wid string, joined *[]*fakeWorld) *Worker {
	t.Helper()
	env := map[string]string{"HVD_ELASTIC_WORKER_ID": wid, "HVD_RENDEZVOUS_EPOCH": "0", "HOROVOD_RANK": "0", "HOROVOD_SIZE": "1",
		"HOROVOD_ELASTIC_TIMEOUT": "2"}
	k, err := New(Config{
		Getenv: func(key string) (string, bool) { v, ok := env[key]; return v, ok },
		Store:  st,
		Logf:   func(string, ...any) {},
		Join: func(_ context.Context, id rendezvous.Identity, timeout time.Duration) (World, error) {
			if timeout != 2*time.Second {
				t.Errorf("join waits %v for peers, want HOROVOD_ELASTIC_TIMEOUT (2s)", timeout)
			}
			w := &fakeWorld{id: id}
			*joined = append(*joined, w)
			return w, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	k.SetTimeouts(-1, -1, 100*time.Millisecond)
	return k
}

// A worker joins each world with the identity assigned to it, names the
// peer that broke a world in failed.<N>.<id>, and exits the job with
// ErrRemoved when an assignment leaves it out.
func TestWorkerJoinsReportsAndLeaves(t *testing.T) {
	st := newMemStore()
	var joined []*fakeWorld
	k := newTestWorker(t, st, "b:0", &joined)
	st.publish(0, []string{"a:0", "b:0", "c:0"}, nil)
	w, err := k.Init(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := joined[0].id
	if id.Rank != 1 || id.Size != 3 || id.LocalRank != 1 || id.Epoch != 0 || id.Hostname != "h1" || id.ServeStore {
		t.Fatalf("joined epoch 0 as %+v", id)
	}
	if again, _ := k.Init(context.Background()); again != w || len(joined) != 1 || k.Epoch() != 0 || k.World() != w {
		t.Fatal("Init with a world open must return that world")
	}
	// The world breaks: set rank 1 of a set {0, 2} (global rank 2, worker
	// c:0) is blamed by the engine; the reset names it.
	joined[0].failures = []SetFailure{{Err: fmt.Errorf("hvd: allreduce: %w", &backends.PeerError{Peer: 1, Global: -1, Err: errors.New("i/o timeout")}), Ranks: []int{0, 2}}}
	k.Failed(errors.New("hvd: allreduce failed"))
	k.Shutdown()
	if !joined[0].closed || k.World() != nil {
		t.Fatal("Shutdown must close the world")
	}
	st.publish(1, []string{"a:0", "b:0"}, []string{"c:0"})
	if _, err := k.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := st.TryGet(context.Background(), FailedKey(0, "b:0")); string(v) != "c:0" {
		t.Fatalf("failure report %q, want c:0 (puts %v)", v, st.puts)
	}
	if len(joined) != 2 || joined[1].id.Epoch != 1 || joined[1].id.Size != 2 {
		t.Fatalf("joined %d worlds, the last as %+v", len(joined), joined[len(joined)-1].id)
	}
	// A world that ends well reports nothing; a driver that skips an epoch
	// is followed to the newest one.
	k.Shutdown()
	st.publish(2, []string{"a:0", "b:0"}, nil)
	st.publish(3, []string{"a:0"}, []string{"b:0"})
	_, err = k.Init(context.Background())
	if !errors.Is(err, ErrRemoved) || !strings.Contains(err.Error(), "worker b:0 is not part of the world of epoch 3 (1 ranks)") {
		t.Fatalf("Init after removal: %v", err)
	}
	if _, ok, _ := st.TryGet(context.Background(), FailedKey(1, "b:0")); ok || len(joined) != 2 {
		t.Fatalf("a world that ended well was reported, or epoch 2 joined: %v", st.puts)
	}
}

// No assignment within HOROVOD_ELASTIC_TIMEOUT + the grace: the error names
// the key and asks for the driver.
func TestWorkerNoAssignment(t *testing.T) {
	st := newMemStore()
	var joined []*fakeWorld
	k := newTestWorker(t, st, "a:0", &joined)
	k.SetTimeouts(100*time.Millisecond, -1, 0)
	_, err := k.Init(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no assignment elastic/assign.0 within 100ms") || len(joined) != 0 {
		t.Fatalf("Init: %v", err)
	}
}

// check_host_updates: rank 0 broadcasts (previous, newest, flags); the
// update interrupts only once the driver has published a newer world.
func TestWorkerCheckHostUpdates(t *testing.T) {
	st := newMemStore()
	var joined []*fakeWorld
	k := newTestWorker(t, st, "a:0", &joined)
	st.publish(0, []string{"a:0", "b:0"}, nil)
	w, err := k.Init(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, up, err := k.CheckHostUpdates(w); up || err != nil {
		t.Fatalf("no update: %v %v", up, err)
	}
	st.Put(context.Background(), elasticproto.HostsUpdatedKey, elasticproto.EncodeHostsUpdated(4, 2))
	if _, up, _ := k.CheckHostUpdates(w); up {
		t.Fatal("an update no newer world reflects interrupted")
	}
	st.Put(context.Background(), elasticproto.HostsUpdatedKey, elasticproto.EncodeHostsUpdated(5, 1))
	st.publish(1, []string{"a:0"}, []string{"b:0"})
	if flags, up, _ := k.CheckHostUpdates(w); !up || flags != 1 {
		t.Fatalf("update to epoch 1: flags %d, updated %v", flags, up)
	}
	if got := fmt.Sprint(joined[0].sent); got != "[[0 0 0] [4 4 0] [4 5 1]]" {
		t.Fatalf("rank 0 broadcast %s", got)
	}
	// Another rank takes what rank 0 broadcast.
	other := &fakeWorld{id: rendezvous.Identity{Rank: 1}, bcast: func(m []int64) { copy(m, []int64{5, 7, 3}) }}
	if flags, up, _ := k.CheckHostUpdates(other); !up || flags != 3 {
		t.Fatalf("rank 1: flags %d, updated %v", flags, up)
	}
}
