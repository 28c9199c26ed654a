package sim

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/tcp"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// keyByKey is a store without range reads.
type keyByKey struct{ backends.Store }

// Formation is one measured world formation on the real store.
type Formation struct {
	Ranks    int
	Requests int64         // HTTP requests the store served
	Time     time.Duration // wall time until every rank had its world
	CPU      time.Duration // this process's CPU meanwhile: the store and the n clients
	Evicted  int64         // connections the store closed as unauthenticated strangers (guard.go)
}

// FormWorld measures the real rendezvous store (its HTTP server on
// loopback, authenticated with a secret as under hvdrun) while n
// in-process clients do what every rank's sdk.Start asks of it: publish
// its host key and read everyone's (rendezvous.ComputeTopology, the real
// function), then, for the engine's TCP mesh and the point-to-point one,
// publish its listen address and read the address of every rank it dials
// at New (the lower ranks of backends/tcp's ConnectedAtStart: all of them
// for a full mesh, as before issue 31 and with batched false; its lower
// partners beyond HVD_TCP_FULL_MESH_MAX). hostSize ranks share a
// host key. epoch > 0 re-forms a world in a fresh scope of the same
// server (elastic). This measures wall time on this machine, with the
// clients on the same cores as the server: an upper bound of the store's
// own cost.
// batched false hides the store's range reads (backends.StoreRangeGetter),
// as before they existed: every value is one request.
func FormWorld(ctx context.Context, srv *rendezvous.Server, secret []byte, n, hostSize, epoch int, batched bool) (Formation, error) {
	before, evicted := srv.Stats().Requests, srv.Stats().Evicted
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := rendezvous.NewClient(rendezvous.ClientConfig{Addr: srv.Addr(), Secret: secret, Epoch: epoch, Timeout: 5 * time.Minute})
			defer c.Close()
			st := c.Store("hvd")
			if !batched {
				st = keyByKey{st}
			}
			host := "host" + strconv.Itoa(r/hostSize)
			if _, err := rendezvous.ComputeTopology(ctx, st, r, n, host); err != nil {
				errs <- err
				return
			}
			for _, mesh := range []string{"ps0", "p2p0"} {
				if err := st.Set(ctx, mesh+"/addr/"+strconv.Itoa(r), []byte("10.0.0.1:40000")); err != nil {
					errs <- err
					return
				}
				// The lower ranks it dials at New: every one for a full mesh
				// (and before issue 31), its lower partners beyond (none for
				// the point-to-point mesh), read in one range.
				lo := 0
				if batched {
					lower := tcp.ConnectedAtStart(r, n, tcp.DefaultFullMeshMax, mesh == "p2p0")
					if lo = r; len(lower) > 0 && lower[0] < r {
						lo = lower[0]
					}
				}
				if _, err := backends.GetRange(ctx, st, mesh+"/addr/", lo, r); err != nil {
					errs <- fmt.Errorf("rank %d reading the lower ranks' addresses: %w", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Formation{}, err
	}
	wall := time.Since(start)
	st := srv.Stats()
	return Formation{Ranks: n, Requests: st.Requests - before, Time: wall, CPU: processCPU() - cpu0, Evicted: st.Evicted - evicted}, nil
}

// processCPU is the CPU time this process has used (user and system): on
// a loaded machine a steadier measure than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
