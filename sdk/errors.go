package sdk

import (
	"errors"
	"fmt"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// Sentinel errors; every error returned by the SDK wraps one of these (or a
// backends error) and says what, where and what to do.
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
	// ErrRemoved: the elastic driver removed this worker from the job
	// (docs/elastic.md); the worker should exit 0.
	ErrRemoved = errors.New("hvd: this worker has been removed from the elastic job")
	// ErrHostsUpdated: hosts were added or removed (elastic); returned as a
	// *HostsUpdatedError by CheckHostUpdates and Commit.
	ErrHostsUpdated = errors.New("hvd: hosts updated")
	// ErrSetUnregistered: a process set could not be re-registered after an
	// elastic reset (its ranks no longer exist); wraps ErrUnknownSet.
	ErrSetUnregistered = fmt.Errorf("%w: unregistered at an elastic reset", ErrUnknownSet)
)
