package fakebackend_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
	"github.com/hvdorg/hvd/backends/internal/fakebackend"
	"github.com/hvdorg/hvd/backends/tcp"
)

// build makes n fake communicators in this process through the registry
// alone (backends.Lookup(...).New), the way the SDK builds any backend,
// with Build.Flat dialling loopback TCP meshes.
func build(t *testing.T, n int) []backends.Communicator {
	t.Helper()
	b, ok := backends.Lookup(fakebackend.Name)
	if !ok || !b.Choosable || !slices.Contains(backends.Choices(), fakebackend.Name) {
		t.Fatalf("the fake backend is not registered as a choice: %v", backends.Choices())
	}
	st := backends.NewMemStore()
	out := make([]backends.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			global := make([]int, n)
			for i := range global {
				global[i] = i
			}
			var planes backends.Planes
			planes, errs[r] = b.New(ctx, backends.Build{
				Name: fmt.Sprintf("ps0-np%d", n), Store: st, Rank: r, Size: n, GlobalRanks: global,
				Hosts: [][]int{global}, LocalRank: r, LocalSize: n, ConnectTimeout: 10 * time.Second,
				Spin: -1, Set: "process set 0",
				Flat: func(ctx context.Context, name string, members []int) (backends.Communicator, error) {
					return tcp.New(ctx, tcp.Config{Store: st, Prefix: name, Rank: slices.Index(members, r), Size: len(members),
						GlobalRanks: members, ConnectTimeout: 10 * time.Second, Spin: -1, LocalSize: n})
				},
			})
			if errs[r] == nil {
				out[r] = planes.Data
				if planes.Control == nil {
					errs[r] = fmt.Errorf("no control plane")
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// The fake backend, built through its registration only, passes the
// conformance suite (data and control planes) at 1 to 4 ranks, and carried
// the suite's collectives itself.
func TestFakeBackendConformance(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			before := fakebackend.Collectives()
			conformance.RunAll(t, build(t, n), conformance.Options{Counts: []int{0, 1, 7, 1001}})
			if got := fakebackend.Collectives() - before; got < int64(n) {
				t.Errorf("the fake backend carried %d collectives", got)
			}
		})
	}
}

// A build without Flat is a clear error, not a panic.
func TestFakeBackendNeedsFlat(t *testing.T) {
	b, _ := backends.Lookup(fakebackend.Name)
	if _, err := b.New(context.Background(), backends.Build{Name: "x", Size: 1}); err == nil {
		t.Fatal("no error")
	}
}
