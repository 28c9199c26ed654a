package nccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
	"github.com/hvdorg/hvd/backends/hier"
	"github.com/hvdorg/hvd/backends/tcp"
)

// HostView (what scripts/gpu-check.sh runs the conformance suite through on
// a GPU): host buffers copied to device scratch and back around every call.
func TestHostViewConformance(t *testing.T) {
	n := newFakeNet(2)
	comms := fakeComms(t, n, 2, nil)
	views := []backends.Communicator{HostView(comms[0]), HostView(comms[1])}
	runCases(t, views, conformance.Options{DTypes: []backends.DType{backends.Float32, backends.Int64, backends.Bool}, Counts: []int{0, 7, 1001}})
	if !slices.Contains(n.calls, "cudaMemcpyHostToDevice") || !slices.Contains(n.calls, "cudaMemcpyDeviceToHost") {
		t.Fatalf("no copies: %v", n.calls)
	}
}

// Horovod's hierarchical allreduce over GPUs, composed from backends/hier
// unchanged: NCCL inside each host (the fake's device views), the host
// transport between hosts (loopback TCP, staged through host memory by
// Staged). Two "hosts" of two ranks; SplitBytes 1 takes the split path
// (local reduce-scatter, cross allreduce of each block, local allgather),
// and a small buffer with split off takes the leader path.
func TestHierarchicalNCCLInsideTCPBetween(t *testing.T) {
	for _, split := range []int{1, 1 << 30} {
		t.Run(fmt.Sprintf("split=%d", split), func(t *testing.T) {
			hosts := [][]int{{0, 1}, {2, 3}}
			const size, count = 4, 1001
			n := newFakeNet(size)
			st := backends.NewMemStore()
			// Every rank's own size-1 communicator does its staging copies.
			copiers := make([]*Comm, size)
			for r := range size {
				c, err := New(context.Background(), Config{Rank: 0, Size: 1, Device: r, Exchange: StoreExchange(st, fmt.Sprintf("copy%d", r)), Lib: n.lib()})
				if err != nil {
					t.Fatal(err)
				}
				copiers[r] = c
				t.Cleanup(func() { c.Close() })
			}
			hc := make([]*hier.Comm, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				wg.Add(1)
				go func() {
					defer wg.Done()
					flat, err := tcp.New(context.Background(), tcp.Config{Store: st, Prefix: "flat", Rank: r, Size: size, ConnectTimeout: 10 * time.Second})
					if err != nil {
						errs[r] = err
						return
					}
					dial := func(ctx context.Context, name string, members []int) (backends.Communicator, error) {
						me := slices.Index(members, r)
						if name[:5] == "local" {
							c, err := New(ctx, Config{Rank: me, Size: len(members), Device: r, Set: name, Exchange: StoreExchange(st, name), Lib: copiers[r].lib})
							if err != nil {
								return nil, err
							}
							return c.On(backends.Device{Kind: backends.GPUMemory, Index: r})
						}
						h, err := tcp.New(ctx, tcp.Config{Store: st, Prefix: name, Rank: me, Size: len(members), ConnectTimeout: 10 * time.Second})
						if err != nil {
							return nil, err
						}
						return NewStaged(h, copiers[r]), nil
					}
					hc[r], errs[r] = hier.New(context.Background(), hier.Config{Rank: r, Size: size, Hosts: hosts, Flat: flat, Dial: dial,
						HierAllreduce: true, SplitBytes: split})
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			n.mu.Lock()
			n.calls = nil
			n.mu.Unlock()
			bufs := make([][]byte, size)
			for r := range size {
				bufs[r] = make([]byte, 4*count)
				for i := range count {
					binary.LittleEndian.PutUint32(bufs[r][4*i:], math.Float32bits(float32(r*1000+i)))
				}
			}
			for r := range size {
				wg.Add(1)
				go func() { defer wg.Done(); errs[r] = hc[r].Allreduce(bufs[r], backends.Float32, backends.Sum) }()
			}
			wg.Wait()
			for r := range size {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				for i := range count {
					got := math.Float32frombits(binary.LittleEndian.Uint32(bufs[r][4*i:]))
					if want := float32(6000 + 4*i); got != want {
						t.Fatalf("rank %d element %d = %v, want %v", r, i, got, want)
					}
				}
				hc[r].Close()
			}
			if !slices.Contains(n.calls, "cudaMemcpyDeviceToHost") || !slices.Contains(n.calls, "cudaMemcpyHostToDevice") {
				t.Fatalf("the cross-host leg did not stage through host memory: %v", n.calls)
			}
		})
	}
}
