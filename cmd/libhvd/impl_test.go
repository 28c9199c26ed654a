package main

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

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

// hvd_wait_reap releases the op waited for and the finished candidates
// after it, up to the buffer's capacity; unknown candidates are skipped and
// the ones not reaped stay in the table. (One process: every op finishes;
// the failed and in-flight cases run at np 2 and 3 in
// python/tests/test_fastpath.py.)
func TestWaitReap(t *testing.T) {
	if _, err := implInit(nil, nil, nil, false); err != nil {
		t.Fatal(err)
	}
	defer implShutdown()
	bufs := make([][]float32, 5)
	ids := make([]int64, 5)
	for i := range bufs {
		bufs[i] = []float32{float32(i), 1}
		id, err := implAllreduceAsync(unsafe.Pointer(&bufs[i][0]), unsafe.Pointer(&bufs[i][0]), int32(sdk.Float32), []int64{2}, int32(sdk.Sum), 1, 1, 0, fmt.Sprintf("reap.%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for _, id := range ids {
		for {
			done, err := implPoll(id)
			if err != nil {
				t.Fatal(err)
			}
			if done == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	reaped := make([]int64, 3)
	n, err := implWaitReap(ids[0], []int64{ids[1], 1 << 40, ids[2], ids[3], ids[4]}, reaped)
	if err != nil || n != 3 || reaped[0] != ids[0] || reaped[1] != ids[1] || reaped[2] != ids[2] {
		t.Fatalf("first reap: %d %v %v, want 3 %v", n, reaped, err, ids[:3])
	}
	for i, id := range ids {
		_, err := implPoll(id)
		if gone := errorCode(err) == codeUnknownHandle; gone != (i < 3) {
			t.Fatalf("handle %d: poll error %v after reaping the first three", i, err)
		}
	}
	reaped = make([]int64, 5)
	if n, err := implWaitReap(ids[3], []int64{ids[0], ids[4]}, reaped); err != nil || n != 2 || reaped[0] != ids[3] || reaped[1] != ids[4] {
		t.Fatalf("second reap: %d %v %v", n, reaped, err)
	}
	if _, err := implWaitReap(ids[4], nil, reaped); errorCode(err) != codeUnknownHandle {
		t.Fatalf("reaping a reaped handle: %v", err)
	}
	for i, b := range bufs {
		if b[0] != float32(i) || b[1] != 1 {
			t.Fatalf("op %d: %v (one rank: the sum is the input)", i, b)
		}
	}
}
