package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The stall inspector's shutdown is one of the sdk's sentinels: the
// coordinator's pending op fails with an error that errors.Is ErrStalled
// (and says which tensor waited for which rank).
func TestStallErrorIsSentinel(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{
		env: map[string]string{"HOROVOD_STALL_CHECK_TIME_SECONDS": "0.1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0.3"},
	})
	_, err := ws[0].GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "alone"})
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("rank 0 (the coordinator): %v; want an error wrapping ErrStalled", err)
	}
	if want := "allreduce.alone (missing ranks: [1])"; !strings.Contains(err.Error(), want) {
		t.Errorf("the stall error does not say %q: %v", want, err)
	}
	for _, e := range []error{ErrClosed, ErrUnsupported, ErrStalled} {
		if e == nil || errors.Is(fmt.Errorf("x: %w", e), ErrShutdown) {
			t.Errorf("sentinel %v is nil or aliases ErrShutdown", e)
		}
	}
}

// A bad launch environment is the user's error, by code end to end: Start
// fails with an error that is both rendezvous.ErrEnv and
// ErrInvalidArgument (cmd/libhvd's INVALID_ARGUMENT, Python's ValueError),
// not an internal one.
func TestBadLaunchEnvIsInvalidArgument(t *testing.T) {
	env := map[string]string{"HOROVOD_RANK": "1", "HOROVOD_SIZE": "x"}
	_, err := Start(context.Background(), Config{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if !errors.Is(err, rendezvous.ErrEnv) || !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrPeerFailure) {
		t.Fatalf("Start with HOROVOD_SIZE=x: %v (want ErrEnv and ErrInvalidArgument)", err)
	}
	if !strings.HasPrefix(err.Error(), "hvd: rendezvous: bad launch environment: ") {
		t.Errorf("message: %v", err)
	}
}
