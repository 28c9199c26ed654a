package sdk

import (
	"errors"
	"fmt"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/elastic"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// Sentinel errors: the SDK's one error vocabulary. Every error returned by
// the SDK wraps one of these (the backends' sentinels are re-exported here,
// so callers — cmd/libhvd's C error codes included — classify errors
// through package sdk alone) and says what, where and what to do.
var (
	// ErrNotInitialized: the SDK was used before Init or after Shutdown.
	ErrNotInitialized = errors.New("hvd: not initialized: call Init first (or the SDK was shut down)")
	// ErrInvalidArgument: bad arguments detected locally at call time (the
	// equivalent of Horovod's ValueError).
	ErrInvalidArgument = backends.ErrInvalidArgument
	// ErrNotMember: a collective on a process set this rank is not part of.
	ErrNotMember = errors.New("hvd: not a member of the process set")
	// ErrUnknownSet: the process set does not exist or was removed.
	ErrUnknownSet = errors.New("hvd: process set provided does not exist, or has not been registered")
	// ErrProcessSetMismatch: ranks registered different process sets.
	ErrProcessSetMismatch = errors.New("hvd: ranks registered different process sets")
	// ErrMismatch: negotiation found that ranks called a collective with
	// different shapes, dtypes or parameters (returned by Handle.Wait).
	ErrMismatch = engine.ErrMismatch
	// ErrShutdown: the SDK or the set was shut down before the op completed.
	ErrShutdown = engine.ErrShutdown
	// ErrPeerFailure: a peer died or broke the protocol (see backends).
	ErrPeerFailure = backends.ErrPeerFailure
	// ErrClosed: a communicator was closed under the operation (the SDK or
	// the set was shut down).
	ErrClosed = backends.ErrClosed
	// ErrUnsupported: the set's backend cannot do what was asked (an
	// operation, a dtype, memory on a device it cannot move).
	ErrUnsupported = backends.ErrUnsupported
	// ErrStalled: the stall inspector gave up waiting for ranks that never
	// submitted a tensor (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS); every
	// pending op of the set fails with it.
	ErrStalled = engine.ErrStalled
	// ErrRemoved: the elastic driver removed this worker from the job
	// (docs/elastic.md); the worker should exit 0.
	ErrRemoved = elastic.ErrRemoved
	// ErrHostsUpdated: hosts were added or removed (elastic); returned as a
	// *HostsUpdatedError by CheckHostUpdates and Commit.
	ErrHostsUpdated = errors.New("hvd: hosts updated")
	// ErrSetUnregistered: a process set could not be re-registered after an
	// elastic reset (its ranks no longer exist); wraps ErrUnknownSet.
	ErrSetUnregistered = fmt.Errorf("%w: unregistered at an elastic reset", ErrUnknownSet)
)
