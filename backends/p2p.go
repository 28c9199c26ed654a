package backends

import (
	"fmt"
	"sync"
)

// Point-to-point calls share one discipline in every backend that offers
// them (tcp, shm): a call checks its peer, holds its communicator's p2p
// lock shared (so Close, and in tcp the collectives, wait for calls in
// flight), fails at once on a closed or broken communicator, and holds the
// lock of its (peer, direction), so calls for distinct pairs progress
// concurrently and calls for one pair are serialised.

// CheckPeer is the error for a point-to-point peer that is not another
// member of a communicator of size members in which this rank is rank.
func CheckPeer(what string, peer, rank, size int) error {
	if peer < 0 || peer >= size || peer == rank {
		return fmt.Errorf("%w: %s rank %d (communicator size %d, this rank %d)", ErrInvalidArgument, what, peer, size, rank)
	}
	return nil
}

// BeginP2P starts a point-to-point call with peer: CheckPeer (size is
// len(locks)), mu taken shared, usable's error if any (the communicator is
// closed or broken), then locks[peer], the lock of that peer and
// direction. done releases both.
func BeginP2P(what string, peer, rank int, mu *sync.RWMutex, locks []sync.Mutex, usable func() error) (done func(), err error) {
	if err := CheckPeer(what, peer, rank, len(locks)); err != nil {
		return nil, err
	}
	mu.RLock()
	if err := usable(); err != nil {
		mu.RUnlock()
		return nil, err
	}
	locks[peer].Lock()
	return func() {
		locks[peer].Unlock()
		mu.RUnlock()
	}, nil
}
