//go:build cgo && linux

package nccl

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
)

// The real loader, symbol table and C trampolines (dl_cgo.go) against a
// one-rank NCCL and CUDA runtime written in C (testdata/fakenccl.c, built
// here): the conformance suite through HostView checks that every call
// passes its arguments in the right order and width, and the async-error
// path runs through the real ncclCommGetAsyncError trampoline.
func TestDLTableOnFakeLibrary(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build testdata/fakenccl.c")
	}
	so := filepath.Join(t.TempDir(), "libfakenccl.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, "testdata/fakenccl.c").CombinedOutput(); err != nil {
		t.Fatalf("building the fake NCCL: %v\n%s", err, out)
	}
	t.Setenv(EnvNCCL, so)
	t.Setenv(EnvCUDART, so)
	lib, err := load(envPaths())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := lib.Version(); v != 21803 || lib.HasSplit() {
		t.Fatalf("version %d, split %v: want 21803 and no ncclCommSplit (the fake has none)", v, lib.HasSplit())
	}
	c, err := New(context.Background(), Config{Rank: 0, Size: 1, Set: "process set 0", Exchange: StoreExchange(backends.NewMemStore(), "id"), Lib: lib})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runCases(t, []backends.Communicator{HostView(c)}, conformance.Options{DTypes: deviceDTypes, Counts: []int{0, 1, 7, 1001, 65539}})
	d, _ := c.On(backends.Device{Kind: backends.GPUMemory})
	// ncclGetErrorString and the async-error path through the trampolines.
	t.Setenv("FAKE_NCCL_ASYNC_ERROR", "6")
	buf := HostView(c)
	err = buf.Allreduce(make([]byte, 8), backends.Float32, backends.Sum)
	if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "remote process exited") {
		t.Fatalf("async error: %v", err)
	}
	if err := d.Barrier(); err == nil {
		t.Fatal("a call after the abort succeeded")
	}
	// A device the fake does not have: cudaSetDevice's error string.
	if _, err := New(context.Background(), Config{Rank: 0, Size: 1, Device: 1, Lib: lib, Exchange: StoreExchange(backends.NewMemStore(), "id")}); err == nil ||
		!strings.Contains(err.Error(), "CUDA device 1 does not exist (1 visible)") {
		t.Fatalf("device 1: %v", err)
	}
}
