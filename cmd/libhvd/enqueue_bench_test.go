package main

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/hvdorg/hvd/sdk"
)

// BenchmarkCEnqueueBatch: the C ABI's per-op path of a batch of 200 in-place
// async allreduces of 4 KiB (implAllreduceAsync, then one implWaitReap for
// all), one rank in this process: the library's own cost per op beside
// the Go SDK's (BenchmarkGoEnqueueBatch), without the cgo crossing.
func BenchmarkCEnqueueBatch(b *testing.B) {
	run := cBatches(b)
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCEnqueueBatchLockedThread: BenchmarkCEnqueueBatch from a
// goroutine locked to its OS thread, as a C caller's (a Python thread) is:
// under one processor, the engine's goroutine then runs on another thread,
// and the processor passes between the two threads through the kernel
// instead of between goroutines of one thread. Its excess over
// BenchmarkCEnqueueBatch is that cost alone, without Python or the cgo
// crossing (issue 27).
func BenchmarkCEnqueueBatchLockedThread(b *testing.B) {
	run := cBatches(b)
	errc := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errc <- run(b.N)
	}()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// cBatches starts one rank in this process (shut down when b ends) and
// returns what runs n batches through the C ABI's per-op path, with b's
// timer reset; it may run on any goroutine.
func cBatches(b *testing.B) func(n int) error {
	initOneRank(b)
	bufs, names := batch()
	shape := []int64{int64(len(bufs[0]))}
	ids := make([]int64, len(bufs))
	reaped := make([]int64, len(bufs))
	b.ReportAllocs()
	b.ResetTimer()
	return func(n int) error {
		for i := 0; i < n; i++ {
			for j, buf := range bufs {
				id, err := implAllreduceAsync(unsafe.Pointer(&buf[0]), unsafe.Pointer(&buf[0]), int32(sdk.Float32), shape, int32(sdk.Sum), 1, 1, 0, names[j], 0)
				if err != nil {
					return err
				}
				ids[j] = id
			}
			// one rank: every op has completed by then, so all are reaped
			if n, err := implWaitReap(ids[len(ids)-1], ids, reaped); err != nil || int(n) != len(ids) {
				return fmt.Errorf("reaped %d of %d: %v", n, len(ids), err)
			}
		}
		return nil
	}
}

// BenchmarkGoEnqueueBatch: the same batch through the Go SDK.
func BenchmarkGoEnqueueBatch(b *testing.B) {
	initOneRank(b)
	w, err := sdk.Current()
	if err != nil {
		b.Fatal(err)
	}
	bufs, names := batch()
	hs := make([]*sdk.Handle, len(bufs))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, buf := range bufs {
			h, err := w.GlobalProcessSet().AllreduceInPlaceAsync(sdk.TensorOf(buf), sdk.ReduceOptions{Op: sdk.Sum, Name: names[j]})
			if err != nil {
				b.Fatal(err)
			}
			hs[j] = h
		}
		for _, h := range hs {
			if _, err := h.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// initOneRank starts the library as one rank in this process, shut down
// when b ends.
func initOneRank(b *testing.B) {
	if _, err := implInit(nil, nil, nil, false); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { implShutdown() })
}

func batch() ([][]float32, []string) {
	bufs := make([][]float32, 200)
	names := make([]string, len(bufs))
	for i := range bufs {
		bufs[i] = make([]float32, 1024)
		names[i] = "grad." + strconv.Itoa(i)
	}
	return bufs, names
}
