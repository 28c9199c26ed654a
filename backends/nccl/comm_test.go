package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
)

// deviceDTypes are the dtypes NCCL reduces (no 16-bit integers).
var deviceDTypes = []backends.DType{backends.Uint8, backends.Int8, backends.Int32, backends.Int64,
	backends.Float16, backends.Float32, backends.Float64, backends.Bool, backends.BFloat16}

// fakeComms builds size communicators over one fake network, concurrently
// (ncclCommInitRank is collective), rank r on GPU r.
func fakeComms(t *testing.T, n *fakeNet, size int, mod func(r int, c *Config)) []*Comm {
	t.Helper()
	st := backends.NewMemStore()
	comms := make([]*Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Rank: r, Size: size, Device: r, Set: "process set 7", Exchange: StoreExchange(st, "nccl-id"), Lib: n.lib()}
			if mod != nil {
				mod(r, &cfg)
			}
			comms[r], errs[r] = New(context.Background(), cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func onGPU(t *testing.T, comms []*Comm) []backends.Communicator {
	out := make([]backends.Communicator, len(comms))
	for r, c := range comms {
		d, err := c.On(backends.Device{Kind: backends.GPUMemory, Index: r, Stream: 0})
		if err != nil {
			t.Fatal(err)
		}
		out[r] = d
	}
	return out
}

// runCases runs the conformance suite's collective cases (point-to-point
// excluded: refused on device memory, tested below) on every rank.
func runCases(t *testing.T, comms []backends.Communicator, o conformance.Options) {
	t.Helper()
	o.NoControl = true
	for _, cs := range conformance.Cases(len(comms), o) {
		// data-plane/*: the views On returns are no data plane (the Comm is;
		// TestHostBuffersGoToTheHostPlane checks its declaration).
		if strings.HasPrefix(cs.Name, "sendrecv") || strings.HasPrefix(cs.Name, "p2p-") || strings.HasPrefix(cs.Name, "data-plane") {
			continue
		}
		t.Run(cs.Name, func(t *testing.T) {
			errs := make([]error, len(comms))
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() { defer wg.Done(); errs[r] = cs.Run(c) }()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s hangs", cs.Name)
			}
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// The collectives' logic (dtype and op mapping, uneven allgather through
// grouped broadcasts, uneven reduce-scatter through grouped reduces,
// alltoall through grouped send/recv, the event and stream ordering) on
// the fake NCCL, checked by the conformance suite at sizes 1, 2 and 3.
func TestConformanceOnFakeNCCL(t *testing.T) {
	for _, size := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			n := newFakeNet(size)
			comms := fakeComms(t, n, size, nil)
			runCases(t, onGPU(t, comms), conformance.Options{DTypes: deviceDTypes, Counts: []int{0, 1, 7, 1001, 65539}})
		})
	}
}

// A peer that never joins: the waiting rank's NCCL reports an asynchronous
// error; the wait turns it into a peer failure naming the set, aborts the
// communicator, and every later call fails at once.
func TestAsyncErrorAbortsAndNamesTheSet(t *testing.T) {
	n := newFakeNet(2)
	comms := fakeComms(t, n, 2, nil)
	d := onGPU(t, comms)
	done := make(chan error, 1)
	go func() { done <- d[0].Allreduce(make([]byte, 64), backends.Float32, backends.Sum) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("allreduce returned before its peer came: %v", err)
	default:
	}
	n.mu.Lock()
	for _, c := range n.comms {
		if c.rank == 0 {
			c.async.Store(int32(RemoteError))
		}
	}
	n.mu.Unlock()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("an asynchronous NCCL error did not end the wait")
	}
	if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "process set 7") || !strings.Contains(err.Error(), "ncclRemoteError") {
		t.Fatalf("error %v: want a peer failure naming the set and the NCCL error", err)
	}
	if !slices.Contains(n.calls, "ncclCommAbort") {
		t.Fatalf("the communicator was not aborted; calls %v", n.calls)
	}
	if err2 := d[0].Allreduce(make([]byte, 64), backends.Float32, backends.Sum); !errors.Is(err2, backends.ErrPeerFailure) {
		t.Fatalf("a call after the failure: %v, want the same peer failure at once", err2)
	}
}

// The sdk closes a set's planes when its control plane finds a peer dead:
// Close must end a wait on the device at once (abort), never hang.
func TestCloseEndsAWait(t *testing.T) {
	n := newFakeNet(2)
	comms := fakeComms(t, n, 2, nil)
	d := onGPU(t, comms)
	done := make(chan error, 1)
	go func() { done <- d[0].Broadcast(make([]byte, 64), 1) }()
	time.Sleep(20 * time.Millisecond)
	comms[0].Close()
	select {
	case err := <-done:
		if !errors.Is(err, backends.ErrClosed) {
			t.Fatalf("error %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
	if !slices.Contains(n.calls, "ncclCommAbort") {
		t.Fatalf("Close during a wait did not abort; calls %v", n.calls)
	}
	// The peer, blocked in the same collective, gets an error too (the
	// fake's abort reaches the group as NCCL's remote error would).
	if err := d[1].Broadcast(make([]byte, 64), 1); !errors.Is(err, backends.ErrPeerFailure) {
		t.Fatalf("the peer's broadcast after the abort: %v, want a peer failure", err)
	}
}

// No completion within OpTimeout: abort, peer failure naming the set and
// the timeout.
func TestTimeoutAborts(t *testing.T) {
	n := newFakeNet(2)
	comms := fakeComms(t, n, 2, func(r int, c *Config) { c.OpTimeout = 150 * time.Millisecond })
	d := onGPU(t, comms)
	start := time.Now()
	err := d[0].Allreduce(make([]byte, 8), backends.Int64, backends.Max)
	if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "did not complete within 150ms") {
		t.Fatalf("error %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("the timeout took %v", el)
	}
}

// A failed enqueue (the NCCL call itself returns an error) breaks the
// communicator with an error naming the call.
func TestEnqueueFailure(t *testing.T) {
	n := newFakeNet(1)
	lib := n.lib()
	comms := fakeComms(t, n, 1, func(r int, c *Config) { c.Lib = lib })
	d := onGPU(t, comms)
	lib.failEnqueue = InvalidUsage
	err := d[0].Allreduce(make([]byte, 4), backends.Float32, backends.Sum)
	if !errors.Is(err, backends.ErrInvalidArgument) || !strings.Contains(err.Error(), "allreduce failed") {
		t.Fatalf("error %v", err)
	}
	if err := d[0].Barrier(); err == nil {
		t.Fatal("a broken communicator ran a barrier")
	}
}

func TestNoDevice(t *testing.T) {
	n := newFakeNet(0)
	_, err := New(context.Background(), Config{Rank: 0, Size: 1, Lib: n.lib(), Set: "process set 0", Exchange: StoreExchange(backends.NewMemStore(), "k")})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no CUDA device visible") || !strings.Contains(err.Error(), "no CUDA-capable device") {
		t.Fatalf("error %v", err)
	}
	n = newFakeNet(1)
	_, err = New(context.Background(), Config{Rank: 0, Size: 1, Device: 3, Lib: n.lib(), Exchange: StoreExchange(backends.NewMemStore(), "k")})
	if !errors.Is(err, backends.ErrInvalidArgument) || !strings.Contains(err.Error(), "CUDA device 3 does not exist (1 visible)") {
		t.Fatalf("error %v", err)
	}
}

func TestDTypesAndDevices(t *testing.T) {
	n := newFakeNet(1)
	comms := fakeComms(t, n, 1, nil)
	c := comms[0]
	d := onGPU(t, comms)[0]
	for _, dt := range []backends.DType{backends.Int16, backends.Uint16} {
		if err := d.Allreduce(make([]byte, 8), dt, backends.Sum); !errors.Is(err, backends.ErrUnsupported) || !strings.Contains(err.Error(), "16-bit integers") {
			t.Errorf("%v: %v", dt, err)
		}
	}
	// Moving bytes works for every dtype (uint8 underneath).
	if err := d.Broadcast(make([]byte, 6), 0); err != nil {
		t.Error(err)
	}
	n.version = 20903
	if err := d.Allreduce(make([]byte, 8), backends.BFloat16, backends.Sum); !errors.Is(err, backends.ErrUnsupported) || !strings.Contains(err.Error(), "2.10") {
		t.Errorf("bfloat16 on NCCL 2.9.3: %v", err)
	}
	if _, err := c.On(backends.Device{Kind: backends.GPUMemory, Index: 1}); !errors.Is(err, backends.ErrUnsupported) || !strings.Contains(err.Error(), "bound to gpu:0") {
		t.Errorf("On another GPU: %v", err)
	}
	if err := d.Send(make([]byte, 4), 0, 1); !errors.Is(err, backends.ErrUnsupported) {
		t.Errorf("device send: %v", err)
	}
	// Host buffers without a host plane are refused; the declaration says so.
	if err := c.Allreduce(make([]byte, 4), backends.Float32, backends.Sum); !errors.Is(err, backends.ErrUnsupported) || !strings.Contains(err.Error(), "without a host plane") {
		t.Errorf("host allreduce: %v", err)
	}
	if !backends.Accepts(c, backends.Device{Kind: backends.GPUMemory}) || backends.Accepts(c, backends.Host) {
		t.Errorf("Memory() = %v", c.Memory())
	}
}

// hostPlane records what the NCCL communicator hands it.
type hostPlane struct {
	backends.Communicator
	calls  []string
	closed bool
}

func (h *hostPlane) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	h.calls = append(h.calls, fmt.Sprintf("allreduce %d %v %v", len(buf), dt, op))
	return nil
}
func (h *hostPlane) Close() error { h.closed = true; return nil }

func TestHostBuffersGoToTheHostPlane(t *testing.T) {
	n := newFakeNet(1)
	hp := &hostPlane{}
	comms := fakeComms(t, n, 1, func(r int, c *Config) { c.Host = hp })
	c := comms[0]
	if err := c.Allreduce(make([]byte, 12), backends.Int32, backends.Min); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hp.calls, []string{"allreduce 12 int32 min"}) {
		t.Fatalf("host plane calls %v", hp.calls)
	}
	if !backends.Accepts(c, backends.Host) {
		t.Fatalf("Memory() = %v with a host plane", c.Memory())
	}
	h, err := c.On(backends.Host)
	if err != nil || h != backends.Communicator(c) {
		t.Fatalf("On(host) = %v, %v", h, err)
	}
	c.Close()
	if !hp.closed {
		t.Fatal("Close did not close the host plane")
	}
	if !slices.Contains(n.calls, "ncclCommDestroy") || slices.Contains(n.calls, "ncclCommAbort") {
		t.Fatalf("an idle Close should destroy, not abort: %v", n.calls)
	}
}

// ncclCommSplit where the library has it; ncclCommInitRank with the
// exchanged id where it has not.
func TestSplitOrInitRank(t *testing.T) {
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			n := newFakeNet(3)
			n.split = split
			parents := fakeComms(t, n, 3, nil)
			n.mu.Lock()
			n.calls = nil
			n.mu.Unlock()
			st := backends.NewMemStore()
			// Members 0 and 2 form a set of 2; member 1 is in none.
			children := make([]*Comm, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r == 1 {
						errs[r] = SplitNone(parents[1])
						return
					}
					rank := r / 2
					children[r], errs[r] = New(context.Background(), Config{Rank: rank, Size: 2, Device: r, Set: "process set 1",
						Parent: parents[r], Color: 1, Key: 2<<16 | rank, Exchange: StoreExchange(st, "ps1"), Lib: parents[r].lib})
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			want := "ncclCommInitRank"
			if split {
				want = "ncclCommSplit"
			}
			if !slices.Contains(n.calls, want) || (split && slices.Contains(n.calls, "ncclCommInitRank") && len(n.calls) != 3+2) {
				t.Fatalf("calls %v, want %s", n.calls, want)
			}
			d0, _ := children[0].On(backends.Device{Kind: backends.GPUMemory, Index: 0})
			d1, _ := children[2].On(backends.Device{Kind: backends.GPUMemory, Index: 2})
			d := []backends.Communicator{d0, d1}
			runCases(t, d, conformance.Options{DTypes: []backends.DType{backends.Float32}, Counts: []int{5}, Ops: []backends.ReduceOp{backends.Sum}})
			children[0].Close()
			children[2].Close()
		})
	}
}

func TestUniqueIDExchange(t *testing.T) {
	var id UniqueID
	copy(id[:], "the id")
	st := backends.NewMemStore()
	got := make([]UniqueID, 3)
	var wg sync.WaitGroup
	for r := 2; r >= 0; r-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := UniqueID{}
			if r == 0 {
				mine = id
			}
			var err error
			if got[r], err = StoreExchange(st, "ps3/nccl")(context.Background(), r, mine); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for r, g := range got {
		if g != id {
			t.Errorf("rank %d got %q", r, g[:8])
		}
	}
	st.Set(context.Background(), "bad", []byte("short"))
	if _, err := StoreExchange(st, "bad")(context.Background(), 1, UniqueID{}); !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "5 bytes") {
		t.Errorf("a short id: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := StoreExchange(st, "absent")(ctx, 1, UniqueID{}); err == nil || !strings.Contains(err.Error(), "rank 0's NCCL unique id") {
		t.Errorf("no rank 0: %v", err)
	}
	// Over a control plane: rank 0's message reaches the others.
	m := &bcast{}
	if g, err := MessengerExchange(m)(context.Background(), 0, id); err != nil || g != id {
		t.Fatalf("rank 0: %v", err)
	}
	if g, err := MessengerExchange(m)(context.Background(), 1, UniqueID{}); err != nil || g != id {
		t.Fatalf("rank 1 got %q, %v", g[:8], err)
	}
}

// bcast is a control plane's BcastMsg in one process: root's last message.
type bcast struct{ last []byte }

func (b *bcast) GatherMsgs([]byte, int) ([][]byte, error) { return nil, nil }
func (b *bcast) BcastMsg(msg []byte, root int) ([]byte, error) {
	if msg != nil {
		b.last = append([]byte(nil), msg...)
	}
	return b.last, nil
}
