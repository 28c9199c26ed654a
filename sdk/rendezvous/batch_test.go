package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// A range read waits for keys published later and answers them in order,
// in a handful of requests instead of one per key.
func TestGetRangeWaitsAndBatches(t *testing.T) {
	s := newServer(t, []byte("k"))
	c := newClient(t, ClientConfig{Addr: s.Addr(), Secret: []byte("k"), Timeout: 5 * time.Second})
	st := c.Store("w")
	if err := st.Set(context.Background(), "a/0", []byte("v0")); err != nil { // learns the server is hvd's
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		for i := 1; i < 40; i++ {
			_ = st.Set(context.Background(), "a/"+strconv.Itoa(i), []byte("v"+strconv.Itoa(i)))
		}
	}()
	before := s.Stats().Requests
	vs, err := backends.GetRange(context.Background(), st, "a/", 0, 40)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if string(v) != "v"+strconv.Itoa(i) {
			t.Fatalf("value %d = %q", i, v)
		}
	}
	// 39 PUTs plus the range read's few long polls (one per key it waited on at most).
	if got := s.Stats().Requests - before - 39; got > 12 {
		t.Fatalf("the range read took %d requests", got)
	}
}

// A timed-out range read names the key still missing; bad ranges are 400.
func TestGetRangeErrors(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	if err := c.Put(ctx, "w", "b/0", []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err := c.GetRange(ctx, "w", "b/", 0, 3)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), `"b/1"`) {
		t.Fatalf("want a timeout naming b/1, got %v", err)
	}
	for _, q := range []string{"range=3-1", "range=x", "range=0-99999999", "range=0-2&range=0-3"} {
		resp, err := http.Get(fmt.Sprintf("http://%s/w/b%%2F?%s", s.Addr(), q))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, resp.StatusCode)
		}
	}
	if _, err := decodeRange([]byte{5, 'a'}, 1); err == nil {
		t.Error("a cut range answer decoded")
	}
}

// Declaring a world's plan makes room for all its ranks' first
// connections: they are not evicted as strangers while they connect.
func TestInitRaisesStrangerBound(t *testing.T) {
	s := newServer(t, nil)
	if s.ln.max != MaxStrangerConns {
		t.Fatalf("bound %d before any plan, want %d", s.ln.max, MaxStrangerConns)
	}
	s.Init(map[string]int{"global": 1024, "local_a": 8})
	if want := 1024 + MaxStrangerConns; s.ln.max != want {
		t.Fatalf("bound %d after a plan of 1024, want %d", s.ln.max, want)
	}
	s.Init(map[string]int{"global": 2})
	if s.ln.max != 1024+MaxStrangerConns {
		t.Fatalf("a smaller plan lowered the bound to %d", s.ln.max)
	}
}

// A store that answers HeaderStore (it holds ?wait_ms requests) but has no
// range reads — an hvd driver store of an older release — refuses the
// first range read with 400: the client then reads key by key, and
// remembers it (TestDriverStore failed with "only GET ?wait_ms=N" before).
func TestGetRangeFallsBackOnAStoreWithoutRanges(t *testing.T) {
	var mu sync.Mutex
	kv := map[string][]byte{}
	ranges := 0
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStore, "1")
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		if q.Has("range") {
			ranges++
			http.Error(w, "query: only GET ?wait_ms=N", http.StatusBadRequest)
			return
		}
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			kv[r.URL.EscapedPath()] = b
		case http.MethodGet:
			v, ok := kv[r.URL.EscapedPath()]
			if !ok {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(v)
		}
	}))
	defer hs.Close()
	c := newClient(t, ClientConfig{Addr: strings.TrimPrefix(hs.URL, "http://"), Timeout: 5 * time.Second})
	ctx := context.Background()
	for i := range 3 {
		if err := c.Put(ctx, "w", "h/"+strconv.Itoa(i), []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		vs, err := c.GetRange(ctx, "w", "h/", 0, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%s", vs); got != "[a b c]" {
			t.Fatalf("values %s", got)
		}
	}
	if ranges != 1 {
		t.Fatalf("%d range reads sent, want 1 (then key by key, remembered)", ranges)
	}
}

// A range's answer is kept for the next reader of the same range (every
// rank reads every host key) until a key of its family changes: a changed
// value, a deleted key and a new epoch (Init) are seen; a change in another
// family keeps it.
func TestGetRangeKeptUntilItsKeysChange(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	for i := range 3 {
		if err := c.Put(ctx, "w", "h/"+strconv.Itoa(i), []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		vs, err := c.GetRange(ctx, "w", "h/", 0, 3)
		if err != nil {
			t.Fatal(err)
		}
		return string(vs[0]) + string(vs[1]) + string(vs[2])
	}
	hits := func() int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.rangeHits }
	if got := read() + read(); got != "abcabc" || hits() != 1 {
		t.Fatalf("read %q, %d answers from the cache, want abcabc and 1", got, hits())
	}
	if err := c.Put(ctx, "w", "other/1", []byte("x")); err != nil { // another family
		t.Fatal(err)
	}
	if got := read(); got != "abc" || hits() != 2 {
		t.Fatalf("after another family changed: %q, %d hits", got, hits())
	}
	if err := c.Put(ctx, "w", "h/1", []byte("B")); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "aBc" {
		t.Fatalf("after h/1 changed: %q", got)
	}
	if err := c.Delete(ctx, "w", "h/2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetRange(ctx, "w", "h/", 0, 3); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), `"h/2"`) {
		t.Fatalf("after h/2 was deleted: %v", err)
	}
	if err := c.Put(ctx, "w", "h/2", []byte("C")); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "aBC" {
		t.Fatalf("after h/2 came back: %q", got)
	}
	s.Init(nil)
	if _, err := c.GetRange(ctx, "w", "h/", 0, 3); !errors.Is(err, ErrTimeout) {
		t.Fatalf("after Init: %v", err)
	}
}
