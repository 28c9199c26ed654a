package rendezvous

import (
	"errors"

	"github.com/hvdorg/hvd/backends"
)

// Sentinel errors. Every error returned by this package starts with
// "hvd: rendezvous:" and wraps one of these where one applies; test with
// errors.Is.
var (
	// ErrUnauthorized: the store rejected the request's HMAC signature
	// (missing, wrong secret, or a timestamp too far from the server clock).
	// Never retried.
	ErrUnauthorized = errors.New("hvd: rendezvous: unauthorized")
	// ErrTimeout: a wait (Client.Get) ran past the client's Timeout or the
	// caller's context deadline. The message names the scope, key, store
	// address and elapsed time, and says to raise HOROVOD_GLOO_TIMEOUT_SECONDS.
	ErrTimeout = errors.New("hvd: rendezvous: timed out")
	// ErrClosed: the store server is shutting down: Server.Close answered a
	// held (or concurrently arriving) request with 503. Requests made after
	// the listener is gone fail with ErrUnavailable instead.
	ErrClosed = errors.New("hvd: rendezvous: store closed")
	// ErrUnavailable: the store could not be reached or kept failing after
	// the retries (3 attempts, 500 ms apart, as Horovod's C++ client does).
	ErrUnavailable = errors.New("hvd: rendezvous: store unavailable")
	// ErrBadRequest: the store rejected the request as malformed (bad path,
	// bad key, value too large, ...). Never retried.
	ErrBadRequest = errors.New("hvd: rendezvous: bad request")
	// ErrEnv: the launch environment is inconsistent (half-set variable
	// pairs, non-integers, rank >= size, missing store address, ...). It
	// is a user's error: errors.Is(err, backends.ErrInvalidArgument) holds
	// too (sdk.ErrInvalidArgument, Python's ValueError), not an internal
	// failure.
	ErrEnv error = envError{}
)

// envError is ErrEnv: its own sentinel, and an invalid argument.
type envError struct{}

func (envError) Error() string { return "hvd: rendezvous: bad launch environment" }

// Is makes ErrEnv an invalid argument for errors.Is.
func (envError) Is(target error) bool { return target == backends.ErrInvalidArgument }
