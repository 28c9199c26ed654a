package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

var _ backends.StoreDeleter = (*scopedStore)(nil)

func newServer(t *testing.T, secret []byte) *Server {
	t.Helper()
	s, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newClient(t *testing.T, cfg ClientConfig) *Client {
	t.Helper()
	c := NewClient(cfg)
	c.retryDelay = 20 * time.Millisecond
	t.Cleanup(c.Close)
	return c
}

// raw sends one unsigned request with a plain http.Client, as Horovod's
// Python and C++ clients do.
func raw(t *testing.T, method, url string, body []byte) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func TestServerAddrPort(t *testing.T) {
	s := newServer(t, nil)
	host, port, err := net.SplitHostPort(s.Addr())
	if err != nil || host != "127.0.0.1" || port != strconv.Itoa(s.Port()) || s.Port() == 0 {
		t.Fatalf("Addr %q Port %d", s.Addr(), s.Port())
	}
	if _, err := NewServer(ServerConfig{Addr: s.Addr()}); err == nil || !strings.Contains(err.Error(), "hvd: rendezvous: store cannot listen") {
		t.Fatalf("second listen on %s: %v", s.Addr(), err)
	}
}

func TestPutGetDelete(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr()})
	ctx := context.Background()
	if _, ok, err := c.TryGet(ctx, "job", "k"); err != nil || ok {
		t.Fatalf("TryGet absent: ok=%v err=%v", ok, err)
	}
	if err := c.Put(ctx, "job", "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "job", "k", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := c.TryGet(ctx, "job", "k"); err != nil || !ok || string(v) != "v2" {
		t.Fatalf("TryGet = %q %v %v", v, ok, err)
	}
	if v, err := c.Get(ctx, "job", "k"); err != nil || string(v) != "v2" {
		t.Fatalf("Get = %q %v", v, err)
	}
	// Empty and binary values are kept exactly.
	bin := []byte{0, 1, 2, 255, '\n', '/'}
	if err := c.Put(ctx, "job", "bin", bin); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "job", "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := c.TryGet(ctx, "job", "bin"); !ok || !bytes.Equal(v, bin) {
		t.Fatalf("binary value = %v", v)
	}
	if v, ok, _ := c.TryGet(ctx, "job", "empty"); !ok || len(v) != 0 {
		t.Fatalf("empty value = %v ok=%v", v, ok)
	}
	// Raw 404 for an absent key, as Horovod's server.
	if code, _, _ := raw(t, "GET", "http://"+s.Addr()+"/job/nope", nil); code != 404 {
		t.Fatalf("absent key: status %d", code)
	}
	if err := c.Delete(ctx, "job", "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.TryGet(ctx, "job", "k"); ok {
		t.Fatal("key still there after DELETE")
	}
	if err := c.Delete(ctx, "job", "k"); err != nil {
		t.Fatalf("deleting an absent key: %v", err)
	}
}

func TestStoreAdapterEscapesKeys(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr()})
	st := c.Store("scope/with slash")
	ctx := context.Background()
	keys := []string{"a/b/c", "sp ace", "pct%2F", "?q=1&x", "#frag", "ünï", "..", "."}
	for i, k := range keys {
		if err := st.Set(ctx, k, []byte(strconv.Itoa(i))); err != nil {
			t.Fatalf("Set(%q): %v", k, err)
		}
	}
	for i, k := range keys {
		v, err := st.Get(ctx, k)
		if err != nil || string(v) != strconv.Itoa(i) {
			t.Fatalf("Get(%q) = %q, %v", k, v, err)
		}
	}
	s.mu.Lock()
	n := len(s.data["scope/with slash"])
	s.mu.Unlock()
	if n != len(keys) {
		t.Fatalf("server holds %d keys in the scope, want %d", n, len(keys))
	}
}

func TestPlanScopeFinalize(t *testing.T) {
	s := newServer(t, nil)
	s.Init(map[string]int{"global": 3, "local_h": 2})
	c := newClient(t, ClientConfig{Addr: s.Addr()})
	ctx := context.Background()
	for r := range 3 {
		if err := c.Put(ctx, "global", "rank_"+strconv.Itoa(r), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Put(ctx, "local_h", "0", []byte("y")); err != nil {
		t.Fatal(err)
	}
	// Ranks 0 and 1 finish (1 twice: a retried DELETE counts once).
	for _, r := range []string{"0", "1", "1"} {
		if err := c.Delete(ctx, "global", r); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, _ := c.TryGet(ctx, "global", "rank_0"); !ok {
		t.Fatal("scope cleared before every rank finished")
	}
	// A plan-scope DELETE needs a rank in range.
	for _, bad := range []string{"3", "-1", "rank_0"} {
		err := c.Delete(ctx, "global", bad)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "plan scope") {
			t.Fatalf("DELETE global/%s: %v", bad, err)
		}
	}
	if err := c.Delete(ctx, "global", "2"); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		if _, ok, _ := c.TryGet(ctx, "global", "rank_"+strconv.Itoa(r)); ok {
			t.Fatalf("rank_%d survived the finalize", r)
		}
	}
	// Other scopes are untouched.
	if _, ok, _ := c.TryGet(ctx, "local_h", "0"); !ok {
		t.Fatal("finalizing global cleared local_h")
	}
	// The scope can be used again and finalized again.
	_ = c.Put(ctx, "global", "again", []byte("z"))
	for r := range 3 {
		_ = c.Delete(ctx, "global", strconv.Itoa(r))
	}
	if _, ok, _ := c.TryGet(ctx, "global", "again"); ok {
		t.Fatal("second round of global not cleared")
	}
	// Init starts a new round: keys gone, new plan.
	_ = c.Put(ctx, "adhoc", "k", []byte("v"))
	s.Init(map[string]int{"global.e1": 1})
	if _, ok, _ := c.TryGet(ctx, "adhoc", "k"); ok {
		t.Fatal("Init did not clear keys")
	}
	if err := c.Delete(ctx, "global", "7"); err != nil {
		t.Fatalf("global is ad hoc after Init: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	s := newServer(t, nil)
	base := "http://" + s.Addr()
	cases := []struct {
		method, path string
		code         int
		want         string
	}{
		{"GET", "/onlyscope", 400, "not /<scope>/<key>"},
		{"GET", "/a/b/c", 400, "more than two segments"},
		{"GET", "/a/", 400, "empty key"},
		{"GET", "//k", 400, "empty scope"},
		{"GET", "/a/b?wait_ms=abc", 400, "wait_ms"},
		{"GET", "/a/b?wait_ms=-5", 400, "wait_ms"},
		{"GET", "/a/b?foo=1", 400, "unknown query parameter"},
		{"PUT", "/a/b?wait_ms=5", 400, "only allowed on GET"},
		{"POST", "/a/b", 405, "not allowed"},
	}
	for _, tc := range cases {
		code, body, hdr := raw(t, tc.method, base+tc.path, nil)
		if code != tc.code || !strings.Contains(string(body), tc.want) || !strings.HasPrefix(string(body), "hvd: rendezvous: ") {
			t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, code, body, tc.code, tc.want)
		}
		if hdr.Get(HeaderStore) != "1" {
			t.Errorf("%s %s: no %s header", tc.method, tc.path, HeaderStore)
		}
	}
	// A body over the limit is refused from its Content-Length with 413.
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /a/b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", MaxValueSize+1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized PUT: %d", resp.StatusCode)
	}
}

func TestNoSecretServerAcceptsPlainHTTP(t *testing.T) {
	s := newServer(t, nil)
	u := "http://" + s.Addr() + "/global/rank_0"
	if code, _, _ := raw(t, "PUT", u, []byte("host-a")); code != 200 {
		t.Fatalf("PUT: %d", code)
	}
	if code, body, _ := raw(t, "GET", u, nil); code != 200 || string(body) != "host-a" {
		t.Fatalf("GET: %d %q", code, body)
	}
	if code, _, _ := raw(t, "DELETE", u, nil); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	if code, _, _ := raw(t, "GET", u, nil); code != 404 {
		t.Fatalf("GET after DELETE: %d", code)
	}
	// Our client reads what the plain client wrote.
	raw(t, "PUT", u, []byte("again"))
	c := newClient(t, ClientConfig{Addr: s.Addr()})
	if v, err := c.Get(context.Background(), "global", "rank_0"); err != nil || string(v) != "again" {
		t.Fatalf("client Get: %q %v", v, err)
	}
}

func TestConcurrentWaits(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Timeout: 10 * time.Second})
	ctx := context.Background()
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	var released atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Get(ctx, "w", "k"+strconv.Itoa(i%25)) // two waiters per key
			if err == nil && string(v) != "v"+strconv.Itoa(i%25) {
				err = fmt.Errorf("waiter %d got %q", i, v)
			}
			released.Add(1)
			errs <- err
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if released.Load() != 0 {
		t.Fatal("a waiter returned before its key was set")
	}
	setAt := time.Now()
	for k := range 25 {
		if err := c.Put(ctx, "w", "k"+strconv.Itoa(k), []byte("v"+strconv.Itoa(k))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if d := time.Since(setAt); d > 3*time.Second {
		t.Fatalf("waiters released %v after the keys were set", d)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	left := len(s.waiters)
	s.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d waiter entries left on the server", left)
	}
}

func TestLongPollDoesNotBusyPoll(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Timeout: 10 * time.Second})
	go func() {
		time.Sleep(700 * time.Millisecond)
		cc := NewClient(ClientConfig{Addr: s.Addr()})
		defer cc.Close()
		_ = cc.Put(context.Background(), "lp", "k", []byte("v"))
	}()
	before := s.requests.Load()
	v, err := c.Get(context.Background(), "lp", "k")
	if err != nil || string(v) != "v" {
		t.Fatalf("Get = %q %v", v, err)
	}
	// One plain GET, one long poll, and the writer's PUT.
	if n := s.requests.Load() - before; n > 4 {
		t.Fatalf("a 700 ms wait made %d requests; long polling should need about 2", n)
	}
}

func TestLegacyHorovodServerFallsBackToPolling(t *testing.T) {
	// A store that behaves like Horovod's Python server: no HeaderStore, no
	// query support (the query would become part of the key).
	var mu sync.Mutex
	data := map[string][]byte{}
	var gets atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case "PUT":
			b, _ := io.ReadAll(r.Body)
			data[r.RequestURI] = b
		case "GET":
			gets.Add(1)
			v, ok := data[r.RequestURI]
			if !ok {
				w.WriteHeader(404)
				return
			}
			_, _ = w.Write(v)
		}
	}))
	defer hs.Close()
	addr := strings.TrimPrefix(hs.URL, "http://")
	c := newClient(t, ClientConfig{Addr: addr, Timeout: 5 * time.Second})
	go func() {
		time.Sleep(300 * time.Millisecond)
		cc := NewClient(ClientConfig{Addr: addr})
		defer cc.Close()
		_ = cc.Put(context.Background(), "global", "0", []byte("addr0"))
	}()
	v, err := c.Get(context.Background(), "global", "0")
	if err != nil || string(v) != "addr0" {
		t.Fatalf("Get against a Horovod-style store = %q %v", v, err)
	}
	if c.longPoll.Load() {
		t.Fatal("client believes a Horovod store long-polls")
	}
	if g := gets.Load(); g < 3 {
		t.Fatalf("expected polling, saw %d GETs", g)
	}
}

func TestGetTimeoutMessage(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Timeout: 200 * time.Millisecond, Epoch: 2})
	start := time.Now()
	_, err := c.Get(context.Background(), "global", "rank_7")
	el := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if el < 200*time.Millisecond || el > 2*time.Second {
		t.Fatalf("gave up after %v, want about 200ms", el)
	}
	msg := err.Error()
	for _, want := range []string{"hvd: rendezvous: timed out", `"rank_7"`, `"global"`, `"global.e2"`, s.Addr(), "HOROVOD_GLOO_TIMEOUT_SECONDS", "gave up after 2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	// The caller's own shorter deadline gives the same kind of error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c2 := newClient(t, ClientConfig{Addr: s.Addr()})
	if _, err := c2.Get(ctx, "global", "rank_7"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("ctx deadline: %v", err)
	}
}

func TestGetCanceled(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr()})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.Get(ctx, "s", "k")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("err = %v", err)
	}
}

func TestAuth(t *testing.T) {
	secret := []byte("0123456789abcdef")
	s := newServer(t, secret)
	ctx := context.Background()

	good := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret})
	if err := good.Put(ctx, "a", "k/1", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := good.Get(ctx, "a", "k/1"); err != nil || string(v) != "v" {
		t.Fatalf("signed Get = %q %v", v, err)
	}
	if err := good.Delete(ctx, "a", "k/1"); err != nil {
		t.Fatal(err)
	}

	stale := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret})
	stale.now = func() time.Time { return time.Now().Add(-6 * time.Minute) }
	future := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret})
	future.now = func() time.Time { return time.Now().Add(6 * time.Minute) }

	cases := []struct {
		name string
		c    *Client
		want string
	}{
		{"missing", newClient(t, ClientConfig{Addr: s.Addr()}), "no X-Hvd-Auth header"},
		{"wrong", newClient(t, ClientConfig{Addr: s.Addr(), Secret: []byte("another key")}), "signature does not match"},
		{"stale", stale, "away from the store's clock"},
		{"future", future, "away from the store's clock"},
	}
	for _, tc := range cases {
		before := s.requests.Load()
		err := tc.c.Put(ctx, "a", "k", []byte("v"))
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "hvd: rendezvous: unauthorized") {
			t.Errorf("%s: Put err = %v", tc.name, err)
		}
		if n := s.requests.Load() - before; n != 1 {
			t.Errorf("%s: 401 was retried (%d requests)", tc.name, n)
		}
		if _, err := tc.c.Get(ctx, "a", "k"); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: Get err = %v", tc.name, err)
		}
	}
	if _, ok, _ := good.TryGet(ctx, "a", "k"); ok {
		t.Fatal("an unauthorized PUT was stored")
	}

	// A signature over another body, path or method is refused.
	ts := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, tc := range []struct{ signMethod, signPath, sendPath string }{
		{"PUT", "/a/k", "/a/k"},             // body differs (signed empty, sent "evil")
		{"PUT", "/a/other", "/a/k"},         // path differs
		{"GET", "/a/k", "/a/k"},             // method differs
		{"PUT", "/a/k?wait_ms=1", "/a/k"},   // query differs
		{"PUT", "/a/k", "/a/k?wait_ms=100"}, // query added
	} {
		req, _ := http.NewRequest("PUT", "http://"+s.Addr()+tc.sendPath, strings.NewReader("evil"))
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderAuth, sign(secret, tc.signMethod, tc.signPath, ts, nil))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(b), "signature") {
			t.Errorf("forged %+v: %d %q", tc, resp.StatusCode, b)
		}
	}
	// A raw client without the header gets a clear 401 text.
	code, body, _ := raw(t, "GET", "http://"+s.Addr()+"/a/k", nil)
	if code != 401 || !strings.Contains(string(body), "HVD_SECRET_KEY") {
		t.Fatalf("raw unsigned GET: %d %q", code, body)
	}
}

func TestEpochIsolation(t *testing.T) {
	s := newServer(t, nil)
	ctx := context.Background()
	e1 := newClient(t, ClientConfig{Addr: s.Addr(), Epoch: 1})
	e2 := newClient(t, ClientConfig{Addr: s.Addr(), Epoch: 2, Timeout: 200 * time.Millisecond})
	e0 := newClient(t, ClientConfig{Addr: s.Addr()})
	if err := e1.Put(ctx, "global", "rank_0", []byte("old round")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e2.TryGet(ctx, "global", "rank_0"); ok {
		t.Fatal("epoch 2 sees epoch 1's key")
	}
	if _, err := e2.Get(ctx, "global", "rank_0"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("epoch 2 Get: %v", err)
	}
	if _, ok, _ := e0.TryGet(ctx, "global", "rank_0"); ok {
		t.Fatal("epoch 0 sees epoch 1's key")
	}
	if v, ok, _ := e1.TryGet(ctx, "global", "rank_0"); !ok || string(v) != "old round" {
		t.Fatal("epoch 1 lost its own key")
	}
	// On the wire: plain scope at epoch 0 (Horovod compatible), suffixed above.
	_ = e0.Put(ctx, "global", "rank_0", []byte("e0"))
	if code, b, _ := raw(t, "GET", "http://"+s.Addr()+"/global/rank_0", nil); code != 200 || string(b) != "e0" {
		t.Fatalf("epoch 0 wire path: %d %q", code, b)
	}
	if code, b, _ := raw(t, "GET", "http://"+s.Addr()+"/global.e1/rank_0", nil); code != 200 || string(b) != "old round" {
		t.Fatalf("epoch 1 wire path: %d %q", code, b)
	}
	if EpochScope("x", 0) != "x" || EpochScope("x", -3) != "x" || EpochScope("x", 12) != "x.e12" {
		t.Fatal("EpochScope")
	}
}

func TestRetries(t *testing.T) {
	// Two 500s, then success: the client retries like Horovod's.
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.WriteHeader(500)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer hs.Close()
	c := newClient(t, ClientConfig{Addr: hs.URL})
	if v, ok, err := c.TryGet(context.Background(), "s", "k"); err != nil || !ok || string(v) != "ok" || n.Load() != 3 {
		t.Fatalf("TryGet = %q %v %v after %d requests", v, ok, err, n.Load())
	}
	// Nothing listening: ErrUnavailable after 3 attempts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c2 := newClient(t, ClientConfig{Addr: dead})
	err = c2.Put(context.Background(), "s", "k", []byte("v"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "failed 3 times") || !strings.Contains(err.Error(), dead) {
		t.Fatalf("dead store: %v", err)
	}
}

func TestCloseReleasesWaitersWithoutLeaks(t *testing.T) {
	base := runtime.NumGoroutine()
	s, err := NewServer(ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientConfig{Addr: s.Addr(), Timeout: 30 * time.Second})
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Get(context.Background(), "never", "k"+strconv.Itoa(i))
			errs <- err
		}()
	}
	// Wait until every waiter is held on the server.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		held := 0
		for _, w := range s.waiters {
			held += w.n
		}
		s.mu.Unlock()
		if held == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d waiters held", held, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range n {
		err := <-errs
		if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "shutting down") {
			t.Fatalf("waiter after Close: %v", err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %v to release waiters", d)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	c.Close()
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, before: %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
