package rendezvous

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// signed builds a request signed as the client signs it, at timestamp ts.
func signed(t *testing.T, secret []byte, method, url string, body []byte, ts int64) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	s := strconv.FormatInt(ts, 10)
	req.Header.Set(HeaderTimestamp, s)
	req.Header.Set(HeaderAuth, sign(secret, method, req.URL.RequestURI(), s, body))
	return req
}

func send(t *testing.T, req *http.Request, body []byte) (int, string) {
	t.Helper()
	req.Body = io.NopCloser(bytes.NewReader(body)) // the captured bytes, sent again
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A captured signed request is accepted once: sent again within the
// timestamp window (issue 29: GET and PUT were replayable, including a PUT
// that overwrites a key with its old value), it is refused with 401.
func TestReplayRefused(t *testing.T) {
	secret := []byte("job secret")
	s := newServer(t, secret)
	base := "http://" + s.Addr() + "/a/k"
	now := time.Now().UnixNano()
	old := []byte("old")
	put1 := signed(t, secret, http.MethodPut, base, old, now)
	if code, text := send(t, put1, old); code != http.StatusOK {
		t.Fatalf("first PUT: %d %s", code, text)
	}
	newer := []byte("new")
	if code, text := send(t, signed(t, secret, http.MethodPut, base, newer, now+1), newer); code != http.StatusOK {
		t.Fatalf("second PUT: %d %s", code, text)
	}
	if code, text := send(t, put1, old); code != http.StatusUnauthorized || !strings.Contains(text, "replayed") {
		t.Errorf("replayed PUT: %d %q, want 401 naming the replay", code, text)
	}
	get := signed(t, secret, http.MethodGet, base, nil, now+2)
	if code, text := send(t, get, nil); code != http.StatusOK || text != "new" {
		t.Errorf("GET: %d %q, want the newer value", code, text)
	}
	if code, text := send(t, get, nil); code != http.StatusUnauthorized || !strings.Contains(text, "replayed") {
		t.Errorf("replayed GET: %d %q, want 401", code, text)
	}
}

// Two clients whose clocks give the same timestamp sign the same request
// identically; the second is refused as a replay and signs it again with a
// new timestamp: both succeed.
func TestReplaySameStampRetried(t *testing.T) {
	secret := []byte("job secret")
	s := newServer(t, secret)
	at := time.Now()
	clock := func() time.Time { return at }
	a := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret})
	b := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret})
	a.now, b.now = clock, clock
	ctx := context.Background()
	for _, c := range []*Client{a, b} {
		if err := c.Put(ctx, "a", "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	before := s.requests.Load()
	if _, ok, err := a.TryGet(ctx, "a", "k"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n := s.requests.Load() - before; n != 1 {
		t.Errorf("a client's own requests share a timestamp: %d requests for one GET", n)
	}
}

// The guard forgets a signature once its timestamp is out of the window
// (whole buckets), and remembers it until then.
func TestReplayGuardForgets(t *testing.T) {
	var g replayGuard
	now := time.Now()
	ts := strconv.FormatInt(now.UnixNano(), 10)
	auth := sign([]byte("s"), "GET", "/a/k", ts, nil)
	if !g.first(ts, auth, now) || g.first(ts, auth, now.Add(MaxClockSkew-replayBucket)) {
		t.Fatal("a signature was accepted twice within the window")
	}
	if g.fresh != 1 {
		t.Fatalf("%d remembered", g.fresh)
	}
	g.first(strconv.FormatInt(now.UnixNano()+1, 10), auth, now.Add(MaxClockSkew+2*replayBucket))
	if g.fresh != 1 {
		t.Errorf("%d remembered after the window: the expired bucket stayed", g.fresh)
	}
}

// BenchmarkReplayGuard: the cost per accepted request (docs/security.md).
func BenchmarkReplayGuard(b *testing.B) {
	var g replayGuard
	now := time.Now()
	auths := make([]string, 1<<16)
	for i := range auths {
		auths[i] = sign([]byte("s"), "GET", "/a/"+strconv.Itoa(i), "1", nil)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// A distinct signature per request, as a client's timestamps make them.
		g.first(strconv.FormatInt(now.UnixNano()+int64(i), 10), auths[i%len(auths)][:56]+strconv.FormatInt(int64(0x10000000+i/len(auths)), 16), now)
	}
}

// BenchmarkSignedPut: a signed PUT round trip on loopback, what the guard's
// cost compares with.
func BenchmarkSignedPut(b *testing.B) {
	secret := []byte("s")
	s, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", Secret: secret})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := NewClient(ClientConfig{Addr: s.Addr(), Secret: secret})
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		if err := c.Put(ctx, "a", "k", []byte("value")); err != nil {
			b.Fatal(err)
		}
	}
}
