package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
)

// The real NCCL on real GPUs: run by scripts/gpu-check.sh with
// HVD_GPU_CHECK=1 (then a missing GPU or NCCL fails instead of skipping).
// Ranks are goroutines, one GPU each (NCCL refuses two ranks on one GPU):
// sizes 1 and, where present, every GPU.
func gpuLib(t *testing.T) (Lib, int) {
	t.Helper()
	lib, err := Load(envPaths())
	if err != nil {
		if os.Getenv("HVD_GPU_CHECK") == "1" {
			t.Fatal(err)
		}
		t.Skipf("no NCCL here (scripts/gpu-check.sh runs this on a GPU): %v", err)
	}
	var n int
	if e := lib.GetDeviceCount(&n); e != cudaSuccess || n == 0 {
		if os.Getenv("HVD_GPU_CHECK") == "1" {
			t.Fatalf("NCCL loads but no GPU is visible (cudaError %d)", e)
		}
		t.Skip("no GPU visible")
	}
	v, _ := lib.Version()
	t.Logf("NCCL %s, %d GPU(s)", VersionString(v), n)
	return lib, n
}

func gpuComms(t *testing.T, lib Lib, size int) []*Comm {
	st := backends.NewMemStore()
	comms := make([]*Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = New(context.Background(), Config{Rank: r, Size: size, Device: r, Set: fmt.Sprintf("gpu set np%d", size),
				Exchange: StoreExchange(st, "id"), Lib: lib, OpTimeout: time.Minute})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func TestGPUConformance(t *testing.T) {
	lib, n := gpuLib(t)
	sizes := []int{1}
	if n > 1 {
		sizes = append(sizes, n)
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			comms := gpuComms(t, lib, size)
			views := make([]backends.Communicator, size)
			for r, c := range comms {
				views[r] = HostView(c)
			}
			runCases(t, views, conformance.Options{DTypes: deviceDTypes})
		})
	}
}

// TestGPUBench prints an nccl-tests-style table (allreduce, in place,
// device memory) for the check's report: size, time, algbw, busbw.
func TestGPUBench(t *testing.T) {
	lib, n := gpuLib(t)
	comms := gpuComms(t, lib, n)
	fmt.Printf("hvd nccl allreduce float32 sum, %d GPU(s), in place\n%12s %12s %10s %10s\n", n, "size(B)", "time(us)", "algbw", "busbw")
	runtime.LockOSThread() // cudaSetDevice before cudaMalloc holds per thread
	defer runtime.UnlockOSThread()
	for size := 1 << 10; size <= 256<<20; size *= 8 {
		bufs := make([][]byte, n)
		for r, c := range comms {
			var p Ptr
			lib.SetDevice(r)
			if e := lib.Malloc(&p, size); e != cudaSuccess {
				t.Fatalf("cudaMalloc %d: %s", size, c.cudaErr(e))
			}
			bufs[r] = deviceSpan(p, size)
			defer lib.Free(p)
		}
		iters := 20
		start := time.Now()
		for range iters {
			var wg sync.WaitGroup
			errs := make([]error, n)
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, _ := c.On(backends.Device{Kind: backends.GPUMemory, Index: r})
					errs[r] = d.Allreduce(bufs[r], backends.Float32, backends.Sum)
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		}
		el := time.Since(start).Seconds() / float64(iters)
		alg := float64(size) / el / 1e9
		fmt.Printf("%12d %12.1f %10.2f %10.2f\n", size, el*1e6, alg, alg*2*float64(n-1)/float64(max(n, 1)))
	}
}
