package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/codegen/abi"
	"github.com/hvdorg/hvd/sdk"
)

// The spec's enum values are the SDK's.
func TestEnumsMatchSDK(t *testing.T) {
	want := map[string]map[string]int{
		"DTYPE": {"UINT8": int(sdk.Uint8), "INT8": int(sdk.Int8), "UINT16": int(sdk.Uint16), "INT16": int(sdk.Int16),
			"INT32": int(sdk.Int32), "INT64": int(sdk.Int64), "FLOAT16": int(sdk.Float16), "FLOAT32": int(sdk.Float32),
			"FLOAT64": int(sdk.Float64), "BOOL": int(sdk.Bool), "BFLOAT16": int(sdk.BFloat16)},
		"REDUCE_OP": {"AVERAGE": int(sdk.Average), "SUM": int(sdk.Sum), "ADASUM": int(sdk.Adasum), "MIN": int(sdk.Min),
			"MAX": int(sdk.Max), "PRODUCT": int(sdk.Product)},
	}
	for _, en := range abi.HVD.Enums {
		w, ok := want[en.Name]
		if !ok {
			t.Errorf("enum %s not checked", en.Name)
			continue
		}
		if len(w) != len(en.Values) {
			t.Errorf("enum %s has %d values, the SDK %d", en.Name, len(en.Values), len(w))
		}
		for _, v := range en.Values {
			if w[v.Name] != v.Value {
				t.Errorf("%s_%s = %d, SDK %d", en.Name, v.Name, v.Value, w[v.Name])
			}
		}
	}
}

// Every SDK error class maps to the code whose Python exception Horovod
// raises for it.
func TestErrorCodes(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("hvd: allreduce on process set 1: %w", e) }
	for _, c := range []struct {
		err  error
		code int32
	}{
		{wrap(sdk.ErrInvalidArgument), codeInvalidArgument},
		{wrap(sdk.ErrNotInitialized), codeNotInitialized},
		{wrap(sdk.ErrNotMember), codeNotMember},
		{wrap(sdk.ErrUnknownSet), codeUnknownSet},
		{wrap(sdk.ErrProcessSetMismatch), codeProcessSetMismatch},
		{wrap(errUnknownHandle), codeUnknownHandle},
		{wrap(backends.ErrUnsupported), codeUnsupported},
		{wrap(sdk.ErrMismatch), codeMismatch},
		{wrap(sdk.ErrShutdown), codeShutdown},
		{wrap(sdk.ErrPeerFailure), codePeerFailure},
		{errors.New("anything else"), codeInternal},
	} {
		if got := errorCode(c.err); got != c.code {
			t.Errorf("errorCode(%v) = %d, want %d", c.err, got, c.code)
		}
	}
}

// Queries before init answer -1; calls answer NOT_INITIALIZED; unknown
// handles UNKNOWN_HANDLE.
func TestBeforeInit(t *testing.T) {
	if implRank() != -1 || implSize() != -1 || implIsHomogeneous() != -1 || implIsInitialized() != 0 {
		t.Fatal("queries before init must answer -1 / 0")
	}
	if _, err := implBarrier(0); errorCode(err) != codeNotInitialized {
		t.Fatalf("barrier before init: %v", err)
	}
	if _, err := implWait(42); errorCode(err) != codeUnknownHandle {
		t.Fatalf("wait on an unknown handle: %v", err)
	}
	if _, err := implInit([]int32{0, 1}, []int32{3}, nil, false); errorCode(err) != codeInvalidArgument {
		t.Fatalf("init with inconsistent set sizes: %v", err)
	}
}
