package nccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/backends"
)

// The real loader (dlopen/dlsym through cgo) on a machine without NCCL:
// every failure names what was looked for and how to fix it. On a machine
// with NCCL the absent-library case cannot be staged and is skipped.
func TestLoadErrors(t *testing.T) {
	if !haveDL {
		t.Setenv(EnvNCCL, "")
		_, err := Load(envPaths())
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "built without cgo") {
			t.Fatalf("error %v", err)
		}
		return
	}
	t.Run("absent", func(t *testing.T) {
		t.Setenv(EnvNCCL, "")
		t.Setenv(EnvCUDART, "")
		if _, err := load(envPaths()); err == nil {
			t.Skip("NCCL and the CUDA runtime load on this machine: the absent case cannot be staged")
		} else if !errors.Is(err, ErrNotFound) {
			t.Fatalf("error %v does not wrap ErrNotFound", err)
		} else if !strings.Contains(err.Error(), "libnccl.so.2") && !strings.Contains(err.Error(), "libcudart.so") {
			t.Fatalf("error %q names neither library", err)
		}
	})
	t.Run("named-file-missing", func(t *testing.T) {
		t.Setenv(EnvNCCL, "/nonexistent/libnccl.so.2")
		_, err := load(envPaths())
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "tried /nonexistent/libnccl.so.2 (HVD_NCCL_LIBRARY=/nonexistent/libnccl.so.2)") ||
			!strings.Contains(err.Error(), "No such file") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("not-nccl", func(t *testing.T) {
		// Real libraries that are not NCCL and CUDA: the symbol check names
		// the file and the missing function.
		t.Setenv(EnvNCCL, "libc.so.6")
		t.Setenv(EnvCUDART, "libm.so.6")
		_, err := load(envPaths())
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "libc.so.6 has no ncclGetVersion: is it libnccl.so.2?") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("cudart-not-cuda", func(t *testing.T) {
		t.Setenv(EnvNCCL, "libc.so.6")
		t.Setenv(EnvCUDART, "libc.so.6")
		_, err := load(envPaths())
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "has no ncclGetVersion") {
			t.Fatalf("error %v", err)
		}
	})
}

// The symbol table: every name once, each library's required functions
// present, the optional ones those whose absence the code handles.
func TestSymbolTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range symbols {
		if seen[s.name] {
			t.Errorf("%s listed twice", s.name)
		}
		seen[s.name] = true
		if want := strings.HasPrefix(s.name, "nccl"); want != (s.lib == fromNCCL) {
			t.Errorf("%s is looked up in the wrong library", s.name)
		}
		if s.optional && s.name != "ncclCommSplit" && s.name != "ncclGetLastError" {
			t.Errorf("%s is optional but nothing checks for its absence", s.name)
		}
	}
	for _, n := range []string{"ncclCommInitRank", "ncclCommAbort", "ncclCommGetAsyncError", "ncclGroupEnd", "cudaEventQuery", "cudaStreamWaitEvent"} {
		if !seen[n] {
			t.Errorf("%s missing", n)
		}
	}
	for v, want := range map[int]string{21803: "2.18.3", 2708: "2.7.8", 22605: "2.26.5"} {
		if got := VersionString(v); got != want {
			t.Errorf("VersionString(%d) = %s, want %s", v, got, want)
		}
	}
}

// The registry: HVD_BACKEND=nccl names it for a set; auto never picks it
// (tcp, preferred, serves every set); flat meshes (hier's, a host plane)
// are never NCCL; it borrows its control plane.
func TestRegistered(t *testing.T) {
	b, ok := backends.Lookup("nccl")
	if !ok || !b.Choosable || b.OwnControl || b.Label != "NCCL" {
		t.Fatalf("nccl registered as %+v", b)
	}
	set := backends.SetInfo{Size: 3, Hosts: 1}
	if c, err := backends.Candidates(set, "nccl"); err != nil || len(c) != 1 || c[0].Name != "nccl" {
		t.Fatalf("HVD_BACKEND=nccl: %v, %v", c, err)
	}
	set.Flat = true
	if c, _ := backends.Candidates(set, "nccl"); len(c) == 0 || c[0].Name == "nccl" {
		t.Fatalf("a flat mesh under HVD_BACKEND=nccl: %v", c)
	}
	for _, c := range backends.ControlCandidates(set) {
		if c.Name == "nccl" {
			t.Fatal("nccl offered as a control plane")
		}
	}
}
