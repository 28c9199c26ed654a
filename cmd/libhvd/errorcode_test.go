package main

import (
	"fmt"
	"testing"

	"github.com/hvdorg/hvd/sdk"
)

// errorCode classifies through the sdk's sentinels alone, with the codes
// the C ABI always had: a closed communicator is a shutdown, an
// unsupported request is unsupported, a stall shutdown is internal
// (Horovod's HorovodInternalError).
func TestErrorCodesThroughSDKSentinels(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int32
	}{
		{fmt.Errorf("hvd: tcp: %w", sdk.ErrClosed), codeShutdown},
		{fmt.Errorf("hvd: %w: float16 adasum", sdk.ErrUnsupported), codeUnsupported},
		{fmt.Errorf("%w: process set 0: tensors waited", sdk.ErrStalled), codeInternal},
	} {
		if got := errorCode(c.err); got != c.code {
			t.Errorf("errorCode(%v) = %d, want %d", c.err, got, c.code)
		}
	}
}
