package sdk

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// Issue 19, defect 5: a job that adds and removes dynamic process sets
// without end keeps its store flat. Every set built two communicators whose
// keys (addresses, shared-memory records, close reasons) stayed in hvdrun's
// store for the rest of the job: about 9 KB per cycle. Now the backends
// delete what they published once nobody needs it. The ranks run as
// goroutines against a real rendezvous server, as under hvdrun.
func TestDynamicSetChurnLeavesStoreFlat(t *testing.T) {
	cycles := 300
	if testing.Short() {
		cycles = 20
	}
	for _, backend := range []string{"tcp", "shm"} {
		t.Run(backend, func(t *testing.T) {
			secret := []byte("churn")
			srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: "127.0.0.1:0", Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			const n = 3
			ws := make([]*World, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := rendezvous.NewClient(rendezvous.ClientConfig{Addr: srv.Addr(), Secret: secret, Timeout: 10 * time.Second})
					t.Cleanup(c.Close)
					ws[r], errs[r] = Start(context.Background(), Config{
						Identity: &rendezvous.Identity{Rank: r, Size: n, Hostname: "h", Timeout: 10 * time.Second},
						Store:    c.Store("hvd"),
						HostKey:  "host0",
						Backend:  backend,
						Dynamic:  true,
						Getenv:   func(string) (string, bool) { return "", false },
					})
				}()
			}
			wg.Wait()
			t.Cleanup(func() {
				for _, w := range ws {
					if w != nil {
						w.Close()
					}
				}
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: Start: %v", r, err)
				}
			}
			sets := [][]int{{0, 1}, {1, 2}, {0, 2}, {2}}
			churn := func(from, to int) {
				t.Helper()
				each(t, ws, func(w *World) error {
					for i := from; i < to; i++ {
						ps, err := w.AddProcessSet(sets[i%len(sets)])
						if err != nil {
							return fmt.Errorf("cycle %d: add: %w", i, err)
						}
						if ps.Included() {
							v := TensorOf([]float32{1})
							if err := ps.AllreduceInPlace(v, ReduceOptions{Op: Sum, Name: "x"}); err != nil {
								return fmt.Errorf("cycle %d: allreduce: %w", i, err)
							}
						}
						if err := w.RemoveProcessSet(ps); err != nil {
							return fmt.Errorf("cycle %d: remove: %w", i, err)
						}
					}
					return nil
				})
			}
			churn(0, len(sets)) // every kind of set once
			before := srv.Stats()
			start := time.Now()
			churn(len(sets), len(sets)+cycles)
			after := srv.Stats()
			t.Logf("%s: %d add/remove cycles in %v; store before: %d keys, %d bytes; after: %d keys, %d bytes",
				backend, cycles, time.Since(start).Round(time.Millisecond), before.Keys, before.Bytes, after.Keys, after.Bytes)
			if after.Keys != before.Keys || after.Bytes != before.Bytes {
				t.Errorf("store grew over %d cycles: %d → %d keys, %d → %d bytes (%.0f bytes per cycle)",
					cycles, before.Keys, after.Keys, before.Bytes, after.Bytes, float64(after.Bytes-before.Bytes)/float64(cycles))
			}
		})
	}
}
