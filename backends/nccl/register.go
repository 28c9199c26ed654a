package nccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// The GPU path: registered only in builds that import this package
// (backends/builtin with the build tag hvd_nccl); docs/gpu.md.
func init() {
	backends.Register(backends.Backend{
		// After tcp, which serves every set: auto never picks NCCL (whether
		// it loads can differ between hosts, and the choice must be the
		// same on every member); HVD_BACKEND=nccl does, for every set.
		Name: "nccl", Label: "NCCL", Preference: 200, Choosable: true, OwnControl: false,
		// Never a flat sub-communicator (hier's meshes, the host plane a
		// Comm is given): those move host memory.
		Serves: func(s backends.SetInfo) bool { return s.Size >= 1 && !s.Flat },
		New:    factory,
		Doc:    "NVIDIA NCCL on GPU memory (loaded at run time), negotiation over the set's host transport",
	})
}

// factory builds the communicator for the registry (Backend.New): this rank's NCCL communicator for a set,
// bound to the GPU of its local rank (Horovod's convention:
// torch.cuda.set_device(hvd.local_rank())), the unique id through the store
// under the communicator's name, and a flat host mesh (auto's choice: shm
// or tcp) for the set's host tensors. The SDK pairs it with a host control
// plane.
func factory(ctx context.Context, b backends.Build) (backends.Planes, error) {
	host, err := b.FlatAll(ctx, b.Name+"/host")
	if err != nil {
		return backends.Planes{}, err
	}
	c, err := New(ctx, Config{
		Rank: b.Rank, Size: b.Size, Device: b.LocalRank,
		Set:       b.Set,
		Exchange:  StoreExchange(b.Store, b.Name+"/nccl-id"),
		Host:      host,
		OpTimeout: b.OpTimeout,
		Paths:     Paths{NCCL: b.Settings.NCCLLibrary, CUDART: b.Settings.CUDARTLibrary},
	})
	if err != nil {
		host.Close()
		if errors.Is(err, ErrNotFound) {
			return backends.Planes{}, fmt.Errorf("HVD_BACKEND=nccl: %w", err)
		}
		return backends.Planes{}, err
	}
	// Every member has read the id once its communicator is up.
	backends.DeleteKeys(ctx, b.Store, b.Name+"/nccl-id")
	return backends.Planes{Data: c}, nil
}
