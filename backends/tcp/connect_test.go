package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// ambushStore lets a test act on a rank's published address before any
// peer can read it: strangers connect to the listener first.
type ambushStore struct {
	*backends.MemStore
	onAddr func(rank int, addr string)
}

func (s ambushStore) Set(ctx context.Context, key string, v []byte) error {
	if i := strings.LastIndex(key, "/addr/"); i >= 0 && s.onAddr != nil {
		var r int
		fmt.Sscan(key[i+len("/addr/"):], &r)
		s.onAddr(r, string(v))
	}
	return s.MemStore.Set(ctx, key, v)
}

// buildMesh builds n communicators on st and returns them with how long
// the slowest New took; it fails the test on an error.
func buildMesh(t *testing.T, st backends.Store, prefix string, n int, timeout time.Duration) ([]*Comm, time.Duration) {
	t.Helper()
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = New(context.Background(), Config{Store: st, Prefix: prefix, Rank: r, Size: n, Secret: []byte("s3cret"), ConnectTimeout: timeout})
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d after %v: %v", r, took, err)
		}
	}
	return comms, took
}

// Issue 19, defect 4: idle connections that reach a listener before the
// real peers must not delay the mesh. Handshakes used to be served one at
// a time with 5 s each, so 8 idle connections cost 40 s (past the connect
// timeout here); now they cost nothing, strangers that send a wrong first
// byte are dropped at once, and more strangers than the acceptor holds
// evict each other, not the peers.
func TestStrangersDoNotDelayMesh(t *testing.T) {
	const n = 3
	_, base := buildMesh(t, backends.NewMemStore(), "base", n, 10*time.Second)

	for _, tc := range []struct {
		name     string
		idle     int // connections that send nothing
		garbage  int // connections that send an HTTP request
		wantDrop bool
	}{
		{"8 idle", 8, 0, false},
		{"idle and garbage", 6, 4, true},
		{"more than the acceptor holds", maxStrangerHandshakes + 20, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var strangers []net.Conn
			var dropped []chan time.Duration
			st := ambushStore{MemStore: backends.NewMemStore(), onAddr: func(rank int, addr string) {
				if rank != 0 {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for i := 0; i < tc.idle+tc.garbage; i++ {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Errorf("stranger %d: %v", i, err)
						return
					}
					strangers = append(strangers, c)
					if i >= tc.idle {
						sent := time.Now()
						c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
						ch := make(chan time.Duration, 1)
						dropped = append(dropped, ch)
						go func() {
							c.SetReadDeadline(time.Now().Add(10 * time.Second))
							io.Copy(io.Discard, c)
							ch <- time.Since(sent)
						}()
					}
				}
			}}
			comms, took := buildMesh(t, st, "ambush", n, 10*time.Second)
			t.Logf("mesh of %d with %d idle and %d garbage strangers: %v (without: %v)", n, tc.idle, tc.garbage, took, base)
			if limit := base + 2*time.Second; took > limit {
				t.Errorf("mesh took %v with strangers, %v without (limit %v)", took, base, limit)
			}
			for i, ch := range dropped {
				if d := <-ch; d > time.Second {
					t.Errorf("garbage stranger %d was closed after %v, want at once", i, d)
				}
			}
			// The mesh works, and no stranger connection is left open.
			errs := runAll(comms, func(c *Comm) error { return c.Allreduce(make([]byte, 64), backends.Float32, backends.Sum) })
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: allreduce: %v", r, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i, c := range strangers[:tc.idle] {
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
					t.Errorf("idle stranger %d still open after the mesh formed: %v", i, err)
				}
				c.Close()
			}
			for _, c := range strangers[tc.idle:] {
				c.Close()
			}
		})
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// Issue 19, defect 5: building and closing a communicator leaves nothing in
// the store. The address is deleted once the mesh is up, and Close tells the
// peers through the connections instead of an abort key.
func TestNoKeysLeftInStore(t *testing.T) {
	st := backends.NewMemStore()
	for i := 0; i < 5; i++ {
		comms, _ := buildMesh(t, st, fmt.Sprintf("keys%d", i), 3, 10*time.Second)
		if n := st.Len(); n != 0 {
			t.Fatalf("cycle %d: %d keys in the store once the mesh is up, want 0", i, n)
		}
		for _, c := range comms {
			c.Close()
		}
		if n := st.Len(); n != 0 {
			t.Fatalf("cycle %d: %d keys in the store after Close, want 0", i, n)
		}
	}
}

// A peer that closed the communicator is named as such (the close notice),
// not as a lost connection.
// The reasons the survivors publish for each other are deleted when they
// close too.
func TestCloseNoticeNamesPeer(t *testing.T) {
	st := backends.NewMemStore()
	comms, _ := buildMesh(t, st, "bye", 3, 10*time.Second)
	comms[2].Close()
	errs := runAll(comms[:2], func(c *Comm) error { return c.Barrier() })
	for r, err := range errs {
		var pe *backends.PeerError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "rank 2 closed the communicator") {
			t.Errorf("rank %d: got %v, want a PeerError saying rank 2 closed the communicator", r, err)
		}
	}
	if st.Len() == 0 {
		t.Error("the survivors published no failure reason")
	}
	for _, c := range comms {
		c.Close()
	}
	if n := st.Len(); n != 0 {
		t.Errorf("%d keys left in the store after every rank closed", n)
	}
}

// Handshakes cut short by the acceptor are retried; the stranger-handling
// goroutines all end with New.
func TestStrangersLeaveNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		var mu sync.Mutex
		var conns []net.Conn
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		}()
		st := ambushStore{MemStore: backends.NewMemStore(), onAddr: func(rank int, addr string) {
			mu.Lock()
			defer mu.Unlock()
			for i := 0; i < 10; i++ {
				if c, err := net.Dial("tcp", addr); err == nil {
					conns = append(conns, c)
				}
			}
		}}
		comms := make([]*Comm, 2)
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				comms[r], _ = New(context.Background(), Config{Store: st, Prefix: "g", Rank: r, Size: 2, ConnectTimeout: 5 * time.Second})
			}()
		}
		wg.Wait()
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
