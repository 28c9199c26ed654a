package tcp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
	"golang.org/x/sys/unix"
)

var prefixSeq atomic.Int64

// newComms builds n communicators in this process over loopback TCP.
func newComms(t testing.TB, n int, tweak func(*Config)) []*Comm {
	t.Helper()
	st := backends.NewMemStore()
	prefix := fmt.Sprintf("test%d", prefixSeq.Add(1))
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Store: st, Prefix: prefix, Rank: r, Size: n, Secret: []byte("s3cret"), ConnectTimeout: 10 * time.Second, Spin: -1, LocalSize: n}
			if tweak != nil {
				tweak(&cfg)
			}
			comms[r], errs[r] = New(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func asComms(cs []*Comm) []backends.Communicator {
	out := make([]backends.Communicator, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

func TestConformance(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			t.Parallel()
			o := conformance.Options{}
			if testing.Short() { // the race detector makes the 1 MiB cases slow
				o.Counts = []int{0, 1, 7, 1001}
			}
			conformance.RunAll(t, asComms(newComms(t, n, nil)), o)
		})
	}
}

// variantDTypes are the dtypes the suites that vary one setting of the
// transport (forced algorithms, lazy connections, encryption) run under
// -short, the race run: one of each element size (1, 2, 4 and 8 bytes:
// what changes how a buffer is split into blocks and chunks) and a 16-bit
// float (reduced through float32). Which dtype it is changes which
// reduction kernel runs, not when buffers pass between goroutines (what
// the race detector watches); TestConformance runs every dtype under
// -race, and the normal run runs every dtype in every variant.
var variantDTypes = []backends.DType{backends.Uint8, backends.BFloat16, backends.Int32, backends.Float32, backends.Float64}

// variantOps: likewise two reduce ops (an arithmetic and a comparing one)
// under -short; the op changes only the kernel.
var variantOps = []backends.ReduceOp{backends.Sum, backends.Min}

// variant returns o with the dtypes cut to variantDTypes and the ops to
// variantOps under -short.
func variant(o conformance.Options) conformance.Options {
	if testing.Short() && o.DTypes == nil {
		o.DTypes = variantDTypes
	}
	if testing.Short() && o.Ops == nil {
		o.Ops = variantOps
	}
	return o
}

// The small/large switch must not change results: force every size through
// the bandwidth algorithms (ring, chain) and through the direct ones.
func TestConformanceForcedAlgorithms(t *testing.T) {
	o := variant(conformance.Options{Counts: []int{0, 1, 7, 1001, 70000}})
	for _, small := range []int{1, 1 << 30} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("small%d/np%d", small, n), func(t *testing.T) {
				conformance.RunAll(t, asComms(newComms(t, n, func(c *Config) { c.SmallBytes = small })), o)
			})
		}
	}
}

// runAll runs f on every rank concurrently and returns the errors.
func runAll(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(c) }()
	}
	wg.Wait()
	return errs
}

func TestMismatchedCountsNamePeer(t *testing.T) {
	comms := newComms(t, 2, nil)
	errs := runAll(comms, func(c *Comm) error {
		buf := make([]byte, 8*(c.Rank()+1))
		return c.Allreduce(buf, backends.Float32, backends.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, backends.ErrPeerFailure) {
			t.Fatalf("rank %d: want peer failure, got %v", r, err)
		}
	}
	if !strings.Contains(errs[0].Error(), "ranks disagree") && !strings.Contains(errs[1].Error(), "ranks disagree") {
		t.Fatalf("no rank explains the disagreement: %v / %v", errs[0], errs[1])
	}
	// The communicator stays broken.
	if err := comms[0].Barrier(); !errors.Is(err, backends.ErrPeerFailure) {
		t.Fatalf("later op: %v", err)
	}
}

func TestDifferentOpsNamed(t *testing.T) {
	comms := newComms(t, 2, nil)
	errs := runAll(comms, func(c *Comm) error {
		if c.Rank() == 0 {
			// The root only sends, so it learns of the problem in its next op.
			if err := c.Broadcast(make([]byte, 16), 0); err != nil {
				return err
			}
			return c.Barrier()
		}
		return c.Allreduce(make([]byte, 16), backends.Float32, backends.Sum)
	})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "broadcast") || !strings.Contains(errs[1].Error(), "allreduce") {
		t.Fatalf("rank 1 should name both ops: %v", errs[1])
	}
	if !errors.Is(errs[0], backends.ErrPeerFailure) || !strings.Contains(errs[0].Error(), "ranks disagree") {
		t.Fatalf("rank 0 should learn why rank 1 stopped: %v", errs[0])
	}
}

// A peer that goes away in the middle of a large allreduce: every survivor
// gets an error naming it, promptly, and the original culprit is named even
// by ranks that were not connected to it in the failing step.
func TestPeerDeathDuringAllreduce(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms := newComms(t, n, nil)
			victim := n - 1
			start := time.Now()
			errs := runAll(comms, func(c *Comm) error {
				if c.Rank() == victim {
					time.Sleep(20 * time.Millisecond)
					return c.Close()
				}
				buf := make([]byte, 64<<20)
				return c.Allreduce(buf, backends.Float32, backends.Sum)
			})
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("survivors took %v to notice", d)
			}
			for r, err := range errs[:victim] {
				var pe *backends.PeerError
				if !errors.As(err, &pe) {
					t.Fatalf("rank %d: want PeerError, got %v", r, err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
					t.Errorf("rank %d: error does not name rank %d: %v", r, victim, err)
				}
			}
		})
	}
}

func TestWrongSecretRefused(t *testing.T) {
	st := backends.NewMemStore()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(context.Background(), Config{Store: st, Prefix: "p", Rank: r, Size: 2, Secret: []byte{byte(r)}, ConnectTimeout: time.Second})
			if c != nil {
				c.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("mesh built despite different secrets: %v %v", errs[0], errs[1])
	}
}

func TestUseAfterClose(t *testing.T) {
	comms := newComms(t, 1, nil)
	comms[0].Close()
	if err := comms[0].Barrier(); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("got %v", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	c := newComms(t, 2, nil)[0]
	cases := map[string]error{
		"odd bytes":    c.Allreduce(make([]byte, 3), backends.Float32, backends.Sum),
		"bad root":     c.Broadcast(nil, 5),
		"counts len":   c.Allgatherv(nil, nil, []int{0}),
		"send to self": c.Send(nil, 0, 1),
	}
	for name, err := range cases {
		if !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestStallTimeout(t *testing.T) {
	comms := newComms(t, 2, func(c *Config) { c.OpTimeout = 300 * time.Millisecond })
	err := comms[0].Barrier() // rank 1 never joins
	if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "no progress") {
		t.Fatalf("got %v", err)
	}
}

func BenchmarkAllreduce(b *testing.B) {
	for _, size := range []int{8, 64 << 10, 4 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			comms := newComms(b, 2, nil)
			bufs := [][]byte{make([]byte, size), make([]byte, size)}
			b.SetBytes(int64(size))
			b.ResetTimer()
			runAll(comms, func(c *Comm) error {
				for i := 0; i < b.N; i++ {
					if err := c.Allreduce(bufs[c.Rank()], backends.Float32, backends.Sum); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// A peer that sends half a frame header and dies: the receiver reports the
// broken stream, it does not hang or panic.
func TestTruncatedFrame(t *testing.T) {
	comms := newComms(t, 2, nil)
	p := comms[1].peers[0]
	if _, err := writev(p.fd, [][]byte{{0x56, 0x48, 1, 0, 9, 9}}); err != nil {
		t.Fatal(err)
	}
	unix.Shutdown(p.fd, unix.SHUT_RDWR)
	err := comms[0].Recv(make([]byte, 4), 1, 0)
	if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("got %v", err)
	}
}

// A corrupt header (bad magic) is a protocol error naming the peer.
func TestCorruptFrame(t *testing.T) {
	comms := newComms(t, 2, nil)
	junk := make([]byte, hdrLen)
	copy(junk, "GET / HTTP/1.1\r\n")
	if _, err := writev(comms[1].peers[0].fd, [][]byte{junk}); err != nil {
		t.Fatal(err)
	}
	err := comms[0].Recv(make([]byte, 4), 1, 0)
	if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "corrupt stream") {
		t.Fatalf("got %v", err)
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var b [hdrLen]byte
	header{kind: kindAllreduce, tag: 1, seq: 2, len: 3}.encode(&b)
	f.Add(b[:])
	f.Add([]byte{0x56, 0x48})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHeader(data)
		if err != nil {
			return
		}
		var back [hdrLen]byte
		h.encode(&back)
		if string(back[:]) != string(data[:hdrLen]) {
			t.Fatalf("round trip: %x -> %+v -> %x", data[:hdrLen], h, back)
		}
		_ = h.describe()
		_ = h.check(header{kind: kindP2P})
	})
}

// Building, using, breaking and closing communicators leaves no goroutine
// behind.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		st := backends.NewMemStore()
		comms := make([]*Comm, 3)
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				comms[r], _ = New(context.Background(), Config{Store: st, Prefix: "leak", Rank: r, Size: 3, ConnectTimeout: 5 * time.Second})
			}()
		}
		wg.Wait()
		runAll(comms, func(c *Comm) error { return c.Allreduce(make([]byte, 1<<20), backends.Float32, backends.Sum) })
		comms[2].Close() // breaks the others' next op
		runAll(comms[:2], func(c *Comm) error { return c.Barrier() })
		for _, c := range comms {
			c.Close()
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines before, %d after", before, n)
	}
}

// A rank that never starts: the others fail within the connect timeout,
// naming it.
func TestMissingRankTimesOut(t *testing.T) {
	st := backends.NewMemStore()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = New(context.Background(), Config{Store: st, Prefix: "missing", Rank: r, Size: 3, ConnectTimeout: 500 * time.Millisecond})
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if err == nil || !strings.Contains(err.Error(), "rank(s) 2") || !strings.Contains(err.Error(), "HOROVOD_GLOO_TIMEOUT_SECONDS") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestControlMessages(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		comms := newComms(t, n, nil)
		root := n - 1
		errs := runAll(comms, func(c *Comm) error {
			msg := []byte(strings.Repeat(fmt.Sprint(c.Rank()), c.Rank()*1000)) // rank 0 sends nothing
			all, err := c.GatherMsgs(msg, root)
			if err != nil {
				return err
			}
			if c.Rank() != root {
				if all != nil {
					return errors.New("non-root got messages")
				}
			} else {
				for r, m := range all {
					if len(m) != r*1000 || (r > 0 && m[0] != byte('0'+r)) {
						return fmt.Errorf("message of rank %d: %d bytes", r, len(m))
					}
				}
			}
			var b []byte
			if c.Rank() == root {
				b = []byte("responses")
			}
			got, err := c.BcastMsg(b, root)
			if err != nil {
				return err
			}
			if string(got) != "responses" {
				return fmt.Errorf("bcast got %q", got)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("np%d rank %d: %v", n, r, err)
			}
		}
	}
}

func TestIdleWakesOnIncomingAndKick(t *testing.T) {
	comms := newComms(t, 2, nil)
	// Kick wakes without incoming data.
	go func() { time.Sleep(20 * time.Millisecond); comms[0].Kick() }()
	in, err := comms[0].Idle(5 * time.Second)
	if err != nil || in {
		t.Fatalf("kick: incoming=%v err=%v", in, err)
	}
	// Timeout.
	start := time.Now()
	if in, err := comms[0].Idle(30 * time.Millisecond); err != nil || in || time.Since(start) < 25*time.Millisecond {
		t.Fatalf("timeout: incoming=%v err=%v after %v", in, err, time.Since(start))
	}
	// A peer starting a collective wakes the idle rank, which then joins it.
	done := make(chan error, 1)
	go func() { done <- comms[1].Barrier() }()
	if in, err := comms[0].Idle(5 * time.Second); err != nil || !in {
		t.Fatalf("incoming: %v %v", in, err)
	}
	if err := comms[0].Barrier(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Close wakes Idle with an error.
	go func() { time.Sleep(20 * time.Millisecond); comms[0].Close() }()
	if _, err := comms[0].Idle(5 * time.Second); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("close: %v", err)
	}
}

// A live peer that does not take part is reported while the wait lasts
// (every Stall.Every, naming it), then the op times out naming it.
func TestStallNoticesThenTimeout(t *testing.T) {
	var mu sync.Mutex
	var notes []string
	stall := backends.Stall{Every: 150 * time.Millisecond, Notice: func(op string, peer int, waited time.Duration) {
		mu.Lock()
		notes = append(notes, fmt.Sprintf("%s peer=%d waited=%v", op, peer, waited.Round(50*time.Millisecond)))
		mu.Unlock()
	}}
	comms := newComms(t, 2, func(c *Config) { c.OpTimeout = 700 * time.Millisecond; c.Stall = stall })
	err := comms[0].Barrier() // rank 1 never joins
	var pe *backends.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "no progress") {
		t.Fatalf("got %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) < 2 {
		t.Fatalf("stall notices before the timeout: %q", notes)
	}
	for _, n := range notes {
		if !strings.Contains(n, "peer=1") {
			t.Fatalf("notice does not name rank 1: %q", notes)
		}
	}
}
