// Package fakebackend is a backend for tests only: it proves that a backend
// is its package plus one registration. It registers "fake" (label FAKE;
// never chosen by auto, only by HVD_BACKEND=fake) with a factory that
// builds nothing of its own: it asks the SDK for a flat communicator over
// the set (Build.Flat: shared memory or TCP, auto's choice) and serves both
// planes through it, counting the collectives it carried. Nothing outside
// tests imports it, except builds with the tag hvd_fakebackend
// (backends/builtin/fake.go), which e2e's TestFakeBackendPythonJob builds
// libhvd.so with.
package fakebackend

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/hvdorg/hvd/backends"
)

// Name is how HVD_BACKEND names it.
const Name = "fake"

func init() {
	backends.Register(backends.Backend{
		Name: Name, Label: "FAKE", Preference: 1000, Choosable: true, OwnControl: true,
		// Not for flat communicators: those are what it is made of.
		Serves: func(s backends.SetInfo) bool { return !s.Flat },
		New:    New,
		Doc:    "a test backend over a flat shm/tcp communicator (backends/internal/fakebackend)",
	})
}

// collectives counts the collectives every fake communicator of this
// process carried.
var collectives atomic.Int64

// Collectives reports how many collectives fake communicators of this
// process have carried.
func Collectives() int64 { return collectives.Load() }

// both is what the inner communicator offers: shm and tcp are both planes.
type both interface {
	backends.Communicator
	backends.ControlPlane
}

// Comm is one rank's fake communicator: the inner flat one, with its
// collectives counted.
type Comm struct{ both }

// New is the registry's factory (backends.Backend.New).
func New(ctx context.Context, b backends.Build) (backends.Planes, error) {
	inner, err := b.FlatAll(ctx, b.Name+"/fake")
	if err != nil {
		return backends.Planes{}, err
	}
	in, ok := inner.(both)
	if !ok {
		inner.Close()
		return backends.Planes{}, fmt.Errorf("%w: fake backend: the flat communicator %T has no control plane", backends.ErrUnsupported, inner)
	}
	c := &Comm{in}
	return backends.Planes{Data: c, Control: c}, nil
}

// Memory implements backends.DataPlane: host memory only.
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

func (c *Comm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	collectives.Add(1)
	return c.both.Allreduce(buf, dt, op)
}

func (c *Comm) Allgatherv(send, recv []byte, counts []int) error {
	collectives.Add(1)
	return c.both.Allgatherv(send, recv, counts)
}

func (c *Comm) Broadcast(buf []byte, root int) error {
	collectives.Add(1)
	return c.both.Broadcast(buf, root)
}

func (c *Comm) Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	collectives.Add(1)
	return c.both.Alltoallv(send, sendCounts, recv, recvCounts)
}

func (c *Comm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	collectives.Add(1)
	return c.both.ReduceScatter(send, recv, counts, dt, op)
}

func (c *Comm) Barrier() error {
	collectives.Add(1)
	return c.both.Barrier()
}
