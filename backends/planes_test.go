package backends_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
	_ "github.com/hvdorg/hvd/backends/hier" // registers itself
	"github.com/hvdorg/hvd/backends/shm"
	"github.com/hvdorg/hvd/backends/tcp"
)

// dataOnly is a data plane without a control plane of its own (as an MPI
// or NCCL plane would be): only Communicator and Memory are visible.
type dataOnly struct{ c backends.Communicator }

func (d dataOnly) Rank() int                     { return d.c.Rank() }
func (d dataOnly) Size() int                     { return d.c.Size() }
func (d dataOnly) Memory() []backends.MemoryKind { return backends.HostOnly() }
func (d dataOnly) Allreduce(b []byte, dt backends.DType, op backends.ReduceOp) error {
	return d.c.Allreduce(b, dt, op)
}
func (d dataOnly) Allgatherv(s, r []byte, counts []int) error { return d.c.Allgatherv(s, r, counts) }
func (d dataOnly) Broadcast(b []byte, root int) error         { return d.c.Broadcast(b, root) }
func (d dataOnly) Alltoallv(s []byte, sc []int, r []byte, rc []int) error {
	return d.c.Alltoallv(s, sc, r, rc)
}
func (d dataOnly) ReduceScatter(s, r []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	return d.c.ReduceScatter(s, r, counts, dt, op)
}
func (d dataOnly) Barrier() error                           { return d.c.Barrier() }
func (d dataOnly) Send(b []byte, dst int, tag uint32) error { return d.c.Send(b, dst, tag) }
func (d dataOnly) Recv(b []byte, src int, tag uint32) error { return d.c.Recv(b, src, tag) }
func (d dataOnly) Close() error                             { return d.c.Close() }

// build connects n ranks of a backend in goroutines.
func build[T any](t *testing.T, n int, dial func(st backends.Store, r int) (T, error)) []T {
	t.Helper()
	st := backends.NewMemStore()
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); out[r], errs[r] = dial(st, r) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPairConformance: a data plane that borrows its control plane (TCP
// data, shared-memory control) passes the whole suite, the control-plane
// cases included, as one communicator.
func TestPairConformance(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			prefix := fmt.Sprintf("pair-%d-%d", n, time.Now().UnixNano())
			data := build(t, n, func(st backends.Store, r int) (*tcp.Comm, error) {
				return tcp.New(context.Background(), tcp.Config{Store: st, Prefix: prefix + "/data", Rank: r, Size: n,
					ConnectTimeout: 10 * time.Second, Spin: -1, LocalSize: n})
			})
			ctl := build(t, n, func(st backends.Store, r int) (*shm.Comm, error) {
				return shm.New(context.Background(), shm.Config{Store: st, Prefix: prefix + "/ctl", Rank: r, Size: n,
					ConnectTimeout: 10 * time.Second, Spin: -1, LocalSize: n, OpTimeout: time.Minute})
			})
			comms := make([]backends.Communicator, n)
			for r := range n {
				p, err := backends.NewPair(dataOnly{data[r]}, ctl[r])
				if err != nil {
					t.Fatal(err)
				}
				comms[r] = p
				t.Cleanup(func() { p.Close() })
			}
			o := conformance.Options{Counts: []int{0, 7, 1001}, DTypes: []backends.DType{backends.Float32, backends.Int8}}
			conformance.RunAll(t, comms, o)
			// The last case closed the pairs: both planes are closed.
			if err := data[1].Barrier(); !errors.Is(err, backends.ErrClosed) && !errors.Is(err, backends.ErrPeerFailure) {
				t.Errorf("the pair's data plane still works after Close: %v", err)
			}
		})
	}
}

// fakePlane is a minimal plane for argument checks.
type fakePlane struct {
	dataOnly
	rank, size int
}

func (f fakePlane) Rank() int { return f.rank }
func (f fakePlane) Size() int { return f.size }

func TestNewPairChecks(t *testing.T) {
	ctl := build(t, 1, func(st backends.Store, r int) (*tcp.Comm, error) {
		return tcp.New(context.Background(), tcp.Config{Store: st, Prefix: "pc", Rank: 0, Size: 1, ConnectTimeout: time.Second})
	})[0]
	defer ctl.Close()
	if _, err := backends.NewPair(fakePlane{rank: 1, size: 2}, ctl); !errors.Is(err, backends.ErrInvalidArgument) {
		t.Errorf("rank 1 of 2 paired with rank 0 of 1: %v", err)
	}
	if _, err := backends.NewPair(nil, ctl); !errors.Is(err, backends.ErrInvalidArgument) {
		t.Errorf("nil data plane: %v", err)
	}
	p, err := backends.NewPair(fakePlane{rank: 0, size: 1}, ctl)
	if err != nil {
		t.Fatal(err)
	}
	if !backends.Accepts(p, backends.Host) || backends.Accepts(p, backends.Device{Kind: backends.GPUMemory}) {
		t.Errorf("pair declares %v", p.Memory())
	}
}

// The registry as the SDK sees it with tcp, shm and hier registered.
func TestCandidates(t *testing.T) {
	names := func(bs []backends.Backend) string {
		var s []string
		for _, b := range bs {
			s = append(s, b.Name)
		}
		return fmt.Sprint(s)
	}
	oneHost := backends.SetInfo{Size: 4, Hosts: 1, HierAllreduce: true, HierAllgather: true}
	twoHosts := backends.SetInfo{Size: 4, Hosts: 2, HierAllreduce: true, HierAllgather: true}
	flatTwo := twoHosts
	flatTwo.Flat = true
	noHier := backends.SetInfo{Size: 4, Hosts: 2}
	single := backends.SetInfo{Size: 1, Hosts: 1, HierAllreduce: true}
	cases := []struct {
		set    backends.SetInfo
		choice string
		want   string
	}{
		{oneHost, "auto", "[shm tcp]"},
		{oneHost, "shm", "[shm]"},
		{oneHost, "tcp", "[tcp]"},
		{twoHosts, "auto", "[hier tcp]"},
		{twoHosts, "shm", "[hier tcp]"},
		{twoHosts, "tcp", "[tcp]"},
		{flatTwo, "auto", "[tcp]"},
		{noHier, "auto", "[tcp]"},
		{single, "shm", "[tcp]"},
		{single, "auto", "[tcp]"},
	}
	for _, c := range cases {
		got, err := backends.Candidates(c.set, c.choice)
		if err != nil || names(got) != c.want {
			t.Errorf("%+v under %s: %s, %v; want %s", c.set, c.choice, names(got), err, c.want)
		}
	}
	if _, err := backends.Candidates(oneHost, "hier"); !errors.Is(err, backends.ErrInvalidArgument) {
		t.Errorf("hier is not choosable: %v", err)
	}
	if got := fmt.Sprint(backends.Choices()); got != "[auto shm tcp]" {
		t.Errorf("Choices = %s", got)
	}
	if got := names(backends.ControlCandidates(twoHosts)); got != "[tcp]" {
		t.Errorf("control planes for a two-host set: %s", got)
	}
	for _, name := range []string{"tcp", "shm", "hier"} {
		if b, ok := backends.Lookup(name); !ok || !b.OwnControl || b.Label == "" {
			t.Errorf("%s: %+v, %v", name, b, ok)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("registering tcp twice did not panic")
		}
	}()
	backends.Register(backends.Backend{Name: "tcp", Label: "X", Serves: func(backends.SetInfo) bool { return false }})
}

// Exchange swaps messages between two ranks with and without SendRecv
// (a large message: blocking sends in the wrong order would deadlock),
// and skips empty halves on both sides alike.
func TestExchange(t *testing.T) {
	prefix := fmt.Sprintf("xchg-%d", time.Now().UnixNano())
	comms := build(t, 2, func(st backends.Store, r int) (*tcp.Comm, error) {
		return tcp.New(context.Background(), tcp.Config{Store: st, Prefix: prefix, Rank: r, Size: 2, ConnectTimeout: 10 * time.Second})
	})
	defer comms[0].Close()
	defer comms[1].Close()
	const n = 4 << 20
	for _, wrap := range []bool{false, true} {
		errs := make(chan error, 2)
		for r, c := range comms {
			var cm backends.Communicator = c
			if wrap {
				cm = dataOnly{c} // no SendRecv: ordered sends
			}
			go func() {
				send, recv := make([]byte, n), make([]byte, n)
				for i := range send {
					send[i] = byte(r + 1)
				}
				if err := backends.Exchange(cm, 1-r, send, recv, 7); err != nil {
					errs <- err
					return
				}
				if recv[0] != byte(2-r) || recv[n-1] != byte(2-r) {
					errs <- fmt.Errorf("rank %d received %d…%d", r, recv[0], recv[n-1])
					return
				}
				// Rank 0 only sends, rank 1 only receives.
				if r == 0 {
					errs <- backends.Exchange(cm, 1, []byte{9}, nil, 8)
				} else {
					one := make([]byte, 1)
					err := backends.Exchange(cm, 0, nil, one, 8)
					if err == nil && one[0] != 9 {
						err = fmt.Errorf("one-way message %d", one[0])
					}
					errs <- err
				}
			}()
		}
		for range comms {
			if err := <-errs; err != nil {
				t.Fatalf("without SendRecv=%v: %v", wrap, err)
			}
		}
	}
}
