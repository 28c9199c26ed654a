//go:build hvd_nccl

package sdk

// The NCCL data plane's constructor for the SDK, ready for the wiring that
// is not done yet (it needs GPU runs to verify and edits in files this
// change did not own): sdk/backend.go's dial gets
//
//	case "nccl":
//		c, err := w.ncclComm(ctx, name, ranks)
//		if err != nil {
//			return mesh{}, err
//		}
//		planes = backends.Planes{Data: c} // pairControl adds the control plane
//
// and the build tag goes once GPU runs pass (scripts/gpu-check.sh). Build
// and vet it with: go vet -tags hvd_nccl ./sdk/

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/nccl"
)

// ncclComm builds this rank's NCCL communicator for a set: bound to the GPU
// of its local rank (Horovod's convention: torch.cuda.set_device(
// hvd.local_rank())), the unique id through the store under the set's
// communicator name, OpTimeout from the same knobs as the host planes, and
// a flat host mesh (shm or tcp, auto's choice) for the set's host tensors.
func (w *World) ncclComm(ctx context.Context, name string, ranks []int) (*nccl.Comm, error) {
	host, err := w.connect(ctx, name+"/host", ranks, true)
	if err != nil {
		return nil, err
	}
	set, _ := commRole(name)
	c, err := nccl.New(ctx, nccl.Config{
		Rank: slices.Index(ranks, w.id.Rank), Size: len(ranks), Device: w.topo.LocalRank,
		Set:       fmt.Sprintf("process set %d", set),
		Exchange:  nccl.StoreExchange(w.store, name+"/nccl-id"),
		Host:      host.Data,
		OpTimeout: w.opTimeout(name),
	})
	if err != nil {
		host.Close()
		if errors.Is(err, nccl.ErrNotFound) {
			return nil, fmt.Errorf("HVD_BACKEND=nccl: %w", err)
		}
		return nil, err
	}
	// Every member has read the id once its communicator is up.
	backends.DeleteKeys(ctx, w.store, name+"/nccl-id")
	return c, nil
}
