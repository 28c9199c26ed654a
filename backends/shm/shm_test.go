package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
)

var prefixSeq atomic.Int64

// newComms builds n communicators in this process (cross-memory attach on
// one's own pid works, so the whole protocol runs).
func newComms(t testing.TB, n int, tweak func(*Config)) []*Comm {
	t.Helper()
	st := backends.NewMemStore()
	prefix := fmt.Sprintf("shmtest%d", prefixSeq.Add(1))
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Store: st, Prefix: prefix, Rank: r, Size: n, ConnectTimeout: 10 * time.Second, Spin: -1, LocalSize: n, OpTimeout: time.Minute}
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

// shmFiles lists the segments this process created (other test binaries
// running in parallel create their own, briefly).
func shmFiles(t testing.TB) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(shmDir)
	if err != nil {
		t.Fatal(err)
	}
	mine := fmt.Sprintf("%s%d-%d-", segPrefix, os.Getuid(), os.Getpid())
	out := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), mine) {
			out[e.Name()] = true
		}
	}
	return out
}

// variantDTypes are the dtypes a race run (-short) takes: one of each
// element size (1, 2, 4, 8 bytes: what changes how a buffer is cut into
// slots, chunks and blocks) and a 16-bit float (reduced through float32).
// Which dtype it is changes which reduction kernel runs, not when buffers
// pass between goroutines (what the race detector watches); backends' own
// tests cover every kernel, and the normal run takes every dtype here.
var variantDTypes = []backends.DType{backends.Uint8, backends.BFloat16, backends.Int32, backends.Float32, backends.Float64}

func TestConformance(t *testing.T) {
	before := shmFiles(t)
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			o := conformance.Options{}
			if testing.Short() {
				o.Counts = []int{0, 1, 7, 1001, 70000}
				o.DTypes = variantDTypes
			}
			conformance.RunAll(t, asComms(newComms(t, n, nil)), o)
		})
	}
	if after := shmFiles(t); len(after) > len(before) {
		t.Errorf("segments left in %s: before %v, after %v", shmDir, before, after)
	}
}

// TestConformancePaths forces every message through the slots or through
// cross-memory attach, and a tiny chunk so pipelining crosses many chunks.
// Under -short (the race run) each path runs variantDTypes and two reduce
// ops, an arithmetic and a comparing one (the op, like the dtype, changes
// only the kernel); TestConformance takes every op under -race.
func TestConformancePaths(t *testing.T) {
	o := conformance.Options{Counts: []int{0, 1, 7, 1001, 70000}}
	if testing.Short() {
		o.DTypes = variantDTypes
		o.Ops = []backends.ReduceOp{backends.Sum, backends.Min}
	}
	for _, tc := range []struct {
		name         string
		small, chunk int
	}{{"all-cma", 1, 0}, {"all-slots", 1 << 20, 0}, {"tiny-chunks", 1, 64}} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/np%d", tc.name, n), func(t *testing.T) {
				conformance.RunAll(t, asComms(newComms(t, n, func(c *Config) { c.SmallBytes, c.ChunkBytes = tc.small, tc.chunk })), o)
			})
		}
	}
}

func TestMismatchIsAnErrorOnEveryRank(t *testing.T) {
	cs := newComms(t, 3, nil)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			if r == 1 {
				buf = make([]byte, 128)
			}
			errs[r] = c.Allreduce(buf, backends.Float32, backends.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "mismatched call") {
			t.Errorf("rank %d: %v, want a mismatch error", r, err)
		}
	}
	// The communicator is broken afterwards.
	if err := cs[0].Barrier(); !errors.Is(err, backends.ErrPeerFailure) {
		t.Errorf("after failure: %v", err)
	}
}

func TestClosedPeerIsAnError(t *testing.T) {
	cs := newComms(t, 3, nil)
	cs[2].Close()
	done := make(chan error, 2)
	for _, c := range cs[:2] {
		go func() { done <- c.Allreduce(make([]byte, 1<<20), backends.Float32, backends.Sum) }()
	}
	for range 2 {
		select {
		case err := <-done:
			var pe *backends.PeerError
			if !errors.As(err, &pe) || pe.Peer != 2 {
				t.Errorf("got %v, want a PeerError naming rank 2", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("hang: a closed peer did not fail the allreduce")
		}
	}
}

func TestOpTimeoutNamesTheMissingRank(t *testing.T) {
	cs := newComms(t, 2, func(c *Config) { c.OpTimeout = 100 * time.Millisecond })
	err := cs[0].Barrier()
	var pe *backends.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "no progress") {
		t.Fatalf("got %v", err)
	}
}

func TestIdleAndKick(t *testing.T) {
	cs := newComms(t, 2, nil)
	if in, err := cs[0].Idle(10 * time.Millisecond); in || err != nil {
		t.Fatalf("idle with nothing to do: %v %v", in, err)
	}
	go func() { time.Sleep(20 * time.Millisecond); cs[0].Kick() }()
	if in, err := cs[0].Idle(5 * time.Second); in || err != nil {
		t.Fatalf("kicked idle: %v %v", in, err)
	}
	done := make(chan error)
	go func() { done <- cs[1].Barrier() }()
	in, err := cs[0].Idle(5 * time.Second)
	if !in || err != nil {
		t.Fatalf("idle with a peer in a barrier: %v %v", in, err)
	}
	if err := cs[0].Barrier(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Kicks make one futex call per sleep of Idle (kickWoke): no Kick may be
// lost by it. Each cycle Idle sleeps and one to three Kicks come at a
// random moment around its start; a lost wake-up would show as an Idle
// that returns only after its 100 ms sleep.
func TestKicksWakeEverySleep(t *testing.T) {
	cs := newComms(t, 2, nil)
	slow := 0
	for cycle := 0; cycle < 300; cycle++ {
		done := make(chan time.Duration)
		go func() {
			start := time.Now()
			if in, err := cs[0].Idle(5 * time.Second); in || err != nil {
				t.Errorf("cycle %d: kicked idle: %v %v", cycle, in, err)
			}
			done <- time.Since(start)
		}()
		time.Sleep(time.Duration(cycle%7) * 50 * time.Microsecond)
		for k := 0; k <= cycle%3; k++ {
			cs[0].Kick()
		}
		if took := <-done; took >= 90*time.Millisecond {
			slow++
			t.Logf("cycle %d: Idle returned %v after its kicks", cycle, took)
		}
	}
	if slow > 0 {
		t.Fatalf("%d of 300 kicked Idles slept until their timeout: a wake-up was lost", slow)
	}
}

func TestMessages(t *testing.T) {
	cs := newComms(t, 3, func(c *Config) { c.SmallBytes = 64 })
	big := make([]byte, defaultSlotBytes+5)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := 0; it < 20; it++ {
				msg := []byte(strings.Repeat(fmt.Sprint(r), r*it+1))
				if r == 1 && it%5 == 0 {
					msg = big
				}
				out, err := c.GatherMsgs(msg, it%3)
				if err != nil {
					t.Error(err)
					return
				}
				if r == it%3 {
					for p, m := range out {
						want := strings.Repeat(fmt.Sprint(p), p*it+1)
						if p == 1 && it%5 == 0 {
							want = string(big)
						}
						if string(m) != want {
							t.Errorf("it %d: gathered from %d: %d bytes, want %d", it, p, len(m), len(want))
						}
					}
				}
				b, err := c.BcastMsg([]byte(fmt.Sprint("it", it)), (it+1)%3)
				if err != nil || string(b) != fmt.Sprint("it", it) {
					t.Errorf("bcast: %q %v", b, err)
				}
			}
		}()
	}
	wg.Wait()
}

// A segment whose creator was killed before every member mapped it (the
// only window in which a name exists) is removed by the next job; a live
// creator's segment and other users' files are left alone.
func TestOrphanedSegmentsAreSwept(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	dead := cmd.Process.Pid
	uid := os.Getuid()
	orphan := filepath.Join(shmDir, fmt.Sprintf("%s%d-%d-00000000deadbeef", segPrefix, uid, dead))
	live := filepath.Join(shmDir, fmt.Sprintf("%s%d-%d-00000000cafef00d", segPrefix, uid, os.Getpid()))
	other := filepath.Join(shmDir, fmt.Sprintf("%s%d-%d-0000000000000001", segPrefix, uid+1, dead))
	for _, p := range []string{orphan, live, other} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	newComms(t, 2, nil)
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphan %s still exists (%v)", orphan, err)
	}
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// Building a communicator leaves nothing in /dev/shm, and neither does a
// failed build (a rank that never arrives).
func TestNoSegmentLeftAfterFailedBuild(t *testing.T) {
	before := shmFiles(t)
	st := backends.NewMemStore()
	_, err := New(context.Background(), Config{Store: st, Prefix: "lonely", Rank: 0, Size: 2, ConnectTimeout: 300 * time.Millisecond, Spin: -1})
	if err == nil {
		t.Fatal("a communicator without its second rank was built")
	}
	// Rank 0 created the segment only after rank 1's record arrived; give
	// it one that then never maps.
	st2 := backends.NewMemStore()
	st2.Set(context.Background(), "half/fact/1", []byte(myFacts().String()))
	_, err = New(context.Background(), Config{Store: st2, Prefix: "half", Rank: 0, Size: 2, ConnectTimeout: 300 * time.Millisecond, Spin: -1})
	if err == nil || !strings.Contains(err.Error(), "did not arrive") {
		t.Fatalf("got %v, want a timeout naming the missing rank", err)
	}
	if after := shmFiles(t); len(after) != len(before) {
		t.Errorf("segments left: before %v, after %v", before, after)
	}
}

// Without eager areas (an engine's communicator) every message is
// rendezvous: a small TrySend does nothing, Send waits for the receiver,
// and messages still arrive intact; the segment is smaller.
func TestNoEager(t *testing.T) {
	cs := newComms(t, 2, func(c *Config) { c.NoEager = true })
	eager := newComms(t, 2, nil)
	if cs[0].eagerBytes != 0 || eager[0].eagerBytes != 64<<10 || cs[0].rankBytes >= eager[0].rankBytes {
		t.Fatalf("eager bytes %d / %d, rank bytes %d / %d", cs[0].eagerBytes, eager[0].eagerBytes, cs[0].rankBytes, eager[0].rankBytes)
	}
	if ok, err := cs[0].TrySend([]byte{1, 2, 3}, 1, 0); ok || err != nil {
		t.Fatalf("TrySend without eager areas: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- cs[0].Send([]byte{1, 2, 3}, 1, 7) }()
	select {
	case err := <-done:
		t.Fatalf("a 3-byte Send returned before the receiver took it (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	buf := make([]byte, 3)
	if err := cs[1].Recv(buf, 0, 7); err != nil || buf[2] != 3 {
		t.Fatalf("recv: %v %v", buf, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
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

// A member that finished its part of the last op and shut down cleanly
// must not make a slower member's op fail: the idle member that notices
// the close reports it to its own engine only (before the fix it aborted
// the communicator, and the slower member's broadcast failed).
func TestCleanCloseDoesNotAbortOthersLastOp(t *testing.T) {
	cs := newComms(t, 3, nil)
	root := []byte{7, 1, 2, 3, 4, 5, 6, 7}
	for _, r := range []int{0, 2} { // the root and a fast member finish
		b := slices.Clone(root)
		if r != 0 {
			b = make([]byte, len(root))
		}
		if err := cs[r].Broadcast(b, 0); err != nil || !slices.Equal(b, root) {
			t.Fatalf("rank %d: %v %v", r, b, err)
		}
	}
	idleErr := make(chan error, 1)
	go func() {
		_, err := cs[2].Idle(-1) // rank 2 has nothing left to do
		idleErr <- err
	}()
	cs[0].Close()
	select {
	case err := <-idleErr:
		var pe *backends.PeerError
		if !errors.As(err, &pe) || pe.Peer != 0 {
			t.Fatalf("idle rank: %v, want an error naming rank 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the idle rank did not notice rank 0's close")
	}
	got := make([]byte, len(root))
	if err := cs[1].Broadcast(got, 0); err != nil || !slices.Equal(got, root) {
		t.Fatalf("the slower rank's broadcast after the root closed: %v %v", got, err)
	}
}

// The first failure published is the one every member reports: a member
// that then fails on another rank (rank 0 exiting after it failed on rank
// 2 dying) names the published cause, not its own. (CI: rank 1 reported
// "rank 0: process exited" after rank 2 was killed.)
func TestFailReportsThePublishedCause(t *testing.T) {
	cs := newComms(t, 3, nil)
	first := cs[0].fail("allreduce", 2, reasonDied, "process exited")
	second := cs[1].fail("allreduce", 0, reasonDied, "process exited")
	var pe *backends.PeerError
	if !errors.As(second, &pe) || pe.Peer != 2 || !strings.Contains(second.Error(), "rank 2") {
		t.Fatalf("rank 1 reported %v; want rank 2's failure as published by rank 0 (%v)", second, first)
	}
	if !errors.As(first, &pe) || pe.Peer != 2 {
		t.Fatalf("rank 0: %v", first)
	}
}
