package nccl

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrNotFound: NCCL or the CUDA runtime could not be loaded (absent, not
// NCCL, too old, or this hvd was built without cgo). It wraps
// backends.ErrUnsupported's meaning for the registry: the set cannot use
// NCCL here.
var ErrNotFound = errors.New("hvd: NCCL is not available")

// The environment variables that name the libraries explicitly (a path, or
// a file name for the dynamic loader's search). This package reads no
// environment: the sdk's knob table parses them into backends.Settings
// (NCCLLibrary, CUDARTLibrary), which the factory hands to New as Paths.
const (
	EnvNCCL   = "HVD_NCCL_LIBRARY"
	EnvCUDART = "HVD_CUDART_LIBRARY"
)

// Paths name the libraries to load (EnvNCCL's and EnvCUDART's values); ""
// tries the default names.
type Paths struct {
	NCCL, CUDART string
}

// The file names tried, in order, when the variables are unset. dlopen
// searches LD_LIBRARY_PATH, the ld.so cache and the libraries already
// loaded (under PyTorch: the libnccl.so.2 its CUDA build loaded).
var (
	ncclNames   = []string{"libnccl.so.2", "libnccl.so"}
	cudartNames = []string{"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}
)

// MinVersion is the oldest NCCL this package drives: ncclSend/ncclRecv
// (alltoall, send/recv, uneven allgather) came in 2.7.
const MinVersion = 20700

// Which library a symbol comes from.
const (
	fromNCCL = iota
	fromCUDART
)

type symbol struct {
	name     string
	lib      int
	optional bool // absent in older releases: the feature is off
}

// symbols is every function the table calls (dl_cgo.go), by library.
var symbols = []symbol{
	{"ncclGetVersion", fromNCCL, false},
	{"ncclGetUniqueId", fromNCCL, false},
	{"ncclCommInitRank", fromNCCL, false},
	{"ncclCommSplit", fromNCCL, true}, // 2.18
	{"ncclCommAbort", fromNCCL, false},
	{"ncclCommDestroy", fromNCCL, false},
	{"ncclCommGetAsyncError", fromNCCL, false},
	{"ncclGetErrorString", fromNCCL, false},
	{"ncclGetLastError", fromNCCL, true}, // 2.13
	{"ncclAllReduce", fromNCCL, false},
	{"ncclBroadcast", fromNCCL, false},
	{"ncclReduce", fromNCCL, false},
	{"ncclAllGather", fromNCCL, false},
	{"ncclReduceScatter", fromNCCL, false},
	{"ncclSend", fromNCCL, false},
	{"ncclRecv", fromNCCL, false},
	{"ncclGroupStart", fromNCCL, false},
	{"ncclGroupEnd", fromNCCL, false},
	{"cudaSetDevice", fromCUDART, false},
	{"cudaGetDeviceCount", fromCUDART, false},
	{"cudaStreamCreateWithFlags", fromCUDART, false},
	{"cudaStreamDestroy", fromCUDART, false},
	{"cudaStreamWaitEvent", fromCUDART, false},
	{"cudaEventCreateWithFlags", fromCUDART, false},
	{"cudaEventRecord", fromCUDART, false},
	{"cudaEventQuery", fromCUDART, false},
	{"cudaEventDestroy", fromCUDART, false},
	{"cudaMalloc", fromCUDART, false},
	{"cudaFree", fromCUDART, false},
	{"cudaMemcpyAsync", fromCUDART, false},
	{"cudaGetErrorString", fromCUDART, false},
}

// candidates returns the names to try for a library: the named one alone
// when set.
func candidates(named string, defaults []string) []string {
	if v := strings.TrimSpace(named); v != "" {
		return []string{v}
	}
	return defaults
}

var loaded struct {
	sync.Mutex
	lib Lib
}

// Load opens NCCL and the CUDA runtime named by p (once per process; a
// failure is retried on the next call, so installing the libraries and
// setting the variables needs no restart of a long-lived test process) and
// returns their function table.
func Load(p Paths) (Lib, error) {
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.lib != nil {
		return loaded.lib, nil
	}
	l, err := load(p)
	if err != nil {
		return nil, err
	}
	loaded.lib = l
	return l, nil
}

func load(p Paths) (Lib, error) {
	if !haveDL {
		return nil, fmt.Errorf("%w: this hvd was built without cgo (CGO_ENABLED=0), so it cannot load libnccl.so.2; rebuild with cgo", ErrNotFound)
	}
	handles := [2]uintptr{}
	paths := [2]string{}
	for i, lib := range []struct {
		what, env, named string
		names            []string
		install          string
	}{
		{"NCCL", EnvNCCL, p.NCCL, ncclNames, "install NCCL 2 (Debian/Ubuntu: libnccl2; pip: nvidia-nccl-cu12) or set " + EnvNCCL + " to its path"},
		{"the CUDA runtime", EnvCUDART, p.CUDART, cudartNames, "install the CUDA runtime (pip: nvidia-cuda-runtime-cu12) or set " + EnvCUDART + " to its path"},
	} {
		names := candidates(lib.named, lib.names)
		h, path, err := dlopen(names)
		if err != nil {
			how := lib.env + " unset"
			if lib.named != "" {
				how = lib.env + "=" + lib.named
			}
			return nil, fmt.Errorf("%w: %s could not be loaded: tried %s (%s): %v; %s",
				ErrNotFound, lib.what, strings.Join(names, ", "), how, err, lib.install)
		}
		handles[i], paths[i] = h, path
	}
	l := &dlLib{f: map[string]uintptr{}}
	for _, s := range symbols {
		// dlsym on a dlopen handle searches that library and its own
		// dependencies only, so a wrong file named by the variables is
		// caught here even when NCCL is loaded elsewhere in the process.
		p := dlsym(handles[s.lib], s.name)
		if p == 0 && !s.optional {
			return nil, fmt.Errorf("%w: %s has no %s: is it %s? (set %s)", ErrNotFound, paths[s.lib], s.name,
				[]string{"libnccl.so.2", "the CUDA runtime (libcudart)"}[s.lib], []string{EnvNCCL, EnvCUDART}[s.lib])
		}
		l.f[s.name] = p
	}
	v, r := getVersion(l.f["ncclGetVersion"])
	if r != Success {
		return nil, fmt.Errorf("%w: ncclGetVersion in %s failed: %v", ErrNotFound, paths[fromNCCL], r)
	}
	if v < MinVersion {
		return nil, fmt.Errorf("%w: %s is NCCL %s; hvd needs %s or newer", ErrNotFound, paths[fromNCCL], VersionString(v), VersionString(MinVersion))
	}
	l.version = v
	return l, nil
}

// VersionString writes an ncclGetVersion code as major.minor.patch (codes
// from 2.9 on are major*10000+minor*100+patch, before major*1000+minor*100+patch).
func VersionString(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}
