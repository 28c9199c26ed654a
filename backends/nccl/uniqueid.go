package nccl

import (
	"context"
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// IDExchange hands rank 0's ncclUniqueId to every member: rank 0 passes
// the id it created, the others a zero id, and every member gets rank 0's
// back. It is collective.
type IDExchange func(ctx context.Context, rank int, id UniqueID) (UniqueID, error)

// StoreExchange exchanges the id through the rendezvous store under key
// (the set's name: every communicator built needs its own). Rank 0 sets
// it; the others wait for it (ctx bounds the wait). The key stays until
// DeleteID (every member has read it once its communicator is up).
func StoreExchange(st backends.Store, key string) IDExchange {
	return func(ctx context.Context, rank int, id UniqueID) (UniqueID, error) {
		if rank == 0 {
			if err := st.Set(ctx, key, id[:]); err != nil {
				return UniqueID{}, fmt.Errorf("publishing the NCCL unique id under %q: %w", key, err)
			}
			return id, nil
		}
		b, err := st.Get(ctx, key)
		if err != nil {
			return UniqueID{}, fmt.Errorf("waiting for rank 0's NCCL unique id under %q: %w", key, err)
		}
		return decodeID(b, "the store key "+key)
	}
}

// MessengerExchange exchanges the id over the set's control plane (one
// BcastMsg from rank 0): what a set whose control plane is already up uses,
// with no store key to clean up.
func MessengerExchange(m backends.Messenger) IDExchange {
	return func(ctx context.Context, rank int, id UniqueID) (UniqueID, error) {
		var msg []byte
		if rank == 0 {
			msg = id[:]
		}
		b, err := m.BcastMsg(msg, 0)
		if err != nil {
			return UniqueID{}, fmt.Errorf("broadcasting the NCCL unique id: %w", err)
		}
		return decodeID(b, "rank 0's control message")
	}
}

func decodeID(b []byte, from string) (UniqueID, error) {
	var id UniqueID
	if len(b) != UniqueIDBytes {
		return id, fmt.Errorf("%w: %s holds %d bytes, not an NCCL unique id (%d bytes)", backends.ErrPeerFailure, from, len(b), UniqueIDBytes)
	}
	copy(id[:], b)
	return id, nil
}
