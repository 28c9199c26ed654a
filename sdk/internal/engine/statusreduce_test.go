package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/tcp"
)

// counted is a tcp communicator that counts the status exchanges of each kind.
type counted struct {
	*tcp.Comm
	reduced, gathered atomic.Int64
}

func (c *counted) ReduceStatus(send []byte, combine func(lo, hi []byte) []byte) ([]byte, error) {
	c.reduced.Add(1)
	return c.Comm.ReduceStatus(send, combine)
}

func (c *counted) AllgatherStatus(send, recv []byte) error {
	c.gathered.Add(1)
	return c.Comm.AllgatherStatus(send, recv)
}

// Engines over real TCP communicators negotiate, cache and compute the same
// whether the status exchange is the flat allgather or the tree reduction
// (chosen by set size), and the tree is what large sets use: idle engines
// are woken by it, settings still come from set rank 0.
func TestEngineStatusTree(t *testing.T) {
	for _, tc := range []struct {
		n, min int
		tree   bool
	}{{3, 2, true}, {5, 4, true}, {3, 64, false}} {
		t.Run(fmt.Sprintf("n%d-min%d", tc.n, tc.min), func(t *testing.T) {
			old := statusTreeMin
			statusTreeMin = tc.min
			defer func() { statusTreeMin = old }()
			st := backends.NewMemStore()
			comms := make([]*counted, tc.n)
			var wg sync.WaitGroup
			errs := make([]error, tc.n)
			for r := range tc.n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := tcp.New(context.Background(), tcp.Config{Store: st, Prefix: "tree", Rank: r, Size: tc.n, Secret: []byte("k"),
						ConnectTimeout: 10 * time.Second, Spin: -1, LocalSize: tc.n})
					comms[r], errs[r] = &counted{Comm: c}, err
				}()
			}
			wg.Wait()
			engines := make([]*Engine, tc.n)
			for r := range tc.n {
				if errs[r] != nil {
					t.Fatal(errs[r])
				}
				e, err := New(Config{Data: comms[r], Control: comms[r], CacheCapacity: 8, FusionThreshold: 1 << 20, Library: "TCP"})
				if err != nil {
					t.Fatal(err)
				}
				engines[r] = e
				defer e.Close(nil)
			}
			for step := range 3 {
				// Rank 0 submits last, after the others idle.
				for r := tc.n - 1; r >= 0; r-- {
					if r == 0 {
						time.Sleep(20 * time.Millisecond)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]byte, 8)
						binary.LittleEndian.PutUint32(buf, math.Float32bits(float32(r+1)))
						binary.LittleEndian.PutUint32(buf[4:], math.Float32bits(float32(step)))
						o := &Op{Type: Allreduce, Name: "a", In: Tensor{Data: buf, DType: backends.Float32, Shape: []int64{2}}, ReduceOp: 1}
						o.Out = o.In
						if errs[r] = engines[r].Enqueue(o); errs[r] != nil {
							return
						}
						if errs[r] = o.Handle().Wait(); errs[r] != nil {
							return
						}
						a, b := math.Float32frombits(binary.LittleEndian.Uint32(buf)), math.Float32frombits(binary.LittleEndian.Uint32(buf[4:]))
						if want := float32(tc.n * (tc.n + 1) / 2); a != want || b != float32(step*tc.n) {
							errs[r] = fmt.Errorf("rank %d step %d: got [%v %v], want [%v %v]", r, step, a, b, want, step*tc.n)
						}
					}()
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
			}
			for r, c := range comms {
				s := engines[r].Stats()
				// The first step negotiates (in one or more rounds, as the
				// ranks' requests arrive), the next two run from the cache.
				if s.Negotiations < 1 || s.CachedOps != 2 {
					t.Errorf("rank %d: %d negotiations, %d cached ops; want some and 2", r, s.Negotiations, s.CachedOps)
				}
				red, gat := c.reduced.Load(), c.gathered.Load()
				if tc.tree && (red < 3 || gat != 0) || !tc.tree && (red != 0 || gat < 3) {
					t.Errorf("rank %d: %d tree reductions, %d allgathers (tree %v)", r, red, gat, tc.tree)
				}
			}
		})
	}
}
