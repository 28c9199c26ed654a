package rendezvous

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSigned writes the header of a request that looks signed (a current
// timestamp, 64 hex digits) but is not.
func fakeSigned(conn net.Conn, method, path string, contentLength int) error {
	ts := strconv.FormatInt(time.Now().UnixNano(), 10)
	_, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\n%s: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
		method, path, HeaderTimestamp, ts, HeaderAuth, strings.Repeat("ab", 32), contentLength)
	return err
}

// Everything a request can be judged by before its body is read is judged
// first: a stranger that announces a body and never sends it is answered at
// once, instead of the server waiting for (and buffering) the body.
func TestRejectsBeforeReadingBody(t *testing.T) {
	s := newServer(t, []byte("secret"))
	ts := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, tc := range []struct {
		name, headers string
		code          int
		want          string
	}{
		{"no signature", "Content-Length: 1000\r\n", 401, "no X-Hvd-Auth"},
		{"short signature", HeaderTimestamp + ": " + ts + "\r\n" + HeaderAuth + ": abcd\r\nContent-Length: 1000\r\n", 401, "hex digits"},
		{"non-hex signature", HeaderTimestamp + ": " + ts + "\r\n" + HeaderAuth + ": " + strings.Repeat("zz", 32) + "\r\nContent-Length: 1000\r\n", 401, "not hex"},
		{"stale timestamp", HeaderTimestamp + ": 1\r\n" + HeaderAuth + ": " + strings.Repeat("ab", 32) + "\r\nContent-Length: 1000\r\n", 401, "away from the store's clock"},
		{"over the limit", HeaderTimestamp + ": " + ts + "\r\n" + HeaderAuth + ": " + strings.Repeat("ab", 32) + "\r\nContent-Length: " + strconv.Itoa(MaxValueSize+1) + "\r\n", 413, "limit"},
		{"no length", HeaderTimestamp + ": " + ts + "\r\n" + HeaderAuth + ": " + strings.Repeat("ab", 32) + "\r\nTransfer-Encoding: chunked\r\n", 411, "Content-Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "PUT /a/k HTTP/1.1\r\nHost: x\r\n%s\r\n", tc.headers)
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer before the body was sent: %v", err)
			}
			var b strings.Builder
			bufio.NewReader(resp.Body).WriteTo(&b)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(b.String(), tc.want) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, b.String(), tc.code, tc.want)
			}
		})
	}
}

// heapWatch samples the heap in use until stopped and reports the peak.
func heapWatch() (stop func() uint64) {
	var mu sync.Mutex
	var peak uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			mu.Lock()
			peak = max(peak, ms.HeapInuse)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// Issue 19, defect 2 (scaled down): strangers who can reach the store send
// large fake-signed uploads, stall half-sent bodies and hold idle
// connections. The store's memory stays bounded by its limits (guard.go)
// and a real client keeps working meanwhile. Before the limits, the 32
// large uploads alone were read whole before their signatures were checked
// (128 MiB, more with ReadAll's growth) and every stalled body was held.
func TestStrangersCannotExhaustMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("sends ~200 MiB over loopback")
	}
	secret := []byte("the job's secret")
	s := newServer(t, secret)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret, Timeout: 20 * time.Second})
	ctx := context.Background()
	if err := c.Put(ctx, "s", "warm", []byte("up")); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	peak := heapWatch()

	const (
		large   = 32      // full uploads of largeLen bytes
		stalled = 48      // bodies of stallLen bytes, all but one byte sent
		idle    = 300     // connections that send nothing (> MaxStrangerConns)
		largeLn = 4 << 20 // over today's MaxValueSize, under the old 64 MiB
		stallLn = 1 << 20
	)
	chunk := make([]byte, 64<<10)
	var conns []net.Conn
	var mu sync.Mutex
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	send := func(conn net.Conn, n int) {
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := conn.Write(chunk[:k]); err != nil {
				return // the server closed it: fine
			}
			n -= k
		}
	}
	var attack sync.WaitGroup
	for i := 0; i < idle; i++ {
		if conn, err := net.Dial("tcp", s.Addr()); err == nil {
			keep(conn)
		}
	}
	for i := 0; i < large+stalled; i++ {
		attack.Add(1)
		go func() {
			defer attack.Done()
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				return
			}
			keep(conn)
			conn.SetWriteDeadline(time.Now().Add(8 * time.Second))
			if i < large {
				if fakeSigned(conn, "PUT", "/s/big"+strconv.Itoa(i), largeLn) == nil {
					send(conn, largeLn)
				}
				return
			}
			if fakeSigned(conn, "PUT", "/s/stall"+strconv.Itoa(i), stallLn) == nil {
				send(conn, stallLn-1)
			}
		}()
	}

	attack.Wait() // every upload sent or refused; the stalled ones hang now
	time.Sleep(200 * time.Millisecond)

	// A real client, under the attack: small values (all hvd stores) and
	// long polls answered by another client's Put.
	start := time.Now()
	other := newClient(t, ClientConfig{Addr: s.Addr(), Secret: secret, Timeout: 20 * time.Second})
	for i := 0; i < 50; i++ {
		k := "real" + strconv.Itoa(i)
		got := make(chan error, 1)
		go func() {
			v, err := c.Get(ctx, "s", k)
			if err == nil && len(v) != 200 {
				err = fmt.Errorf("got %d bytes", len(v))
			}
			got <- err
		}()
		if err := other.Put(ctx, "s", k, []byte(strings.Repeat("v", 200))); err != nil {
			t.Fatalf("real client Put %d during the attack: %v", i, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("real client Get %d during the attack: %v", i, err)
		}
	}
	t.Logf("real client: 50 Put + waiting Get during the attack in %v", time.Since(start))
	during := s.Stats()
	growth := int64(peak()) - int64(base)
	t.Logf("heap in use: base %d MiB, peak growth %d MiB; stats during the attack: %+v", base>>20, growth>>20, during)
	if limit := int64(48 << 20); growth > limit {
		t.Errorf("server heap grew by %d MiB under the attack, want at most %d MiB (budget %d MiB)", growth>>20, limit>>20, MaxPendingBodyBytes>>20)
	}
	if during.Strangers > MaxStrangerConns {
		t.Errorf("%d stranger connections held, limit %d", during.Strangers, MaxStrangerConns)
	}
	if during.PendingBodyBytes > MaxPendingBodyBytes {
		t.Errorf("%d unverified body bytes pending, limit %d", during.PendingBodyBytes, MaxPendingBodyBytes)
	}
	for i := 0; i < large+stalled; i++ {
		for _, k := range []string{"big", "stall"} {
			if _, ok, _ := c.TryGet(ctx, "s", k+strconv.Itoa(i)); ok {
				t.Fatalf("a fake-signed value %s%d was stored", k, i)
			}
		}
	}

	// Once the strangers leave, nothing of theirs is held, and a value at
	// the limit goes through.
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for st := s.Stats(); st.Strangers > 0 || st.PendingBodyBytes > 0; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("after the attack: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Put(ctx, "s", "max", make([]byte, MaxValueSize)); err != nil {
		t.Fatalf("value of MaxValueSize after the attack: %v", err)
	}
}

// More idle strangers than the server holds: the oldest are closed, so the
// count stays at the limit.
func TestIdleStrangersEvicted(t *testing.T) {
	s := newServer(t, []byte("k"))
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < MaxStrangerConns+40; i++ {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Evicted < 40 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := s.Stats()
	if st.Strangers > MaxStrangerConns || st.Evicted < 40 {
		t.Fatalf("after %d idle connections: %+v", len(conns), st)
	}
	// The first connection was evicted: the server closed it.
	conns[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("oldest idle connection still open")
	}
}
