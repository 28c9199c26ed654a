//go:build ignore

// Probe for issue 18 (see README.md here; output in bench/results/2026-12-01-raw18/probes/results.txt): go run this file (pipeline_copy.go with pipeline_nt.go and pipeline_nt_amd64.s from a scratch module).
package main

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func alloc(n int) []byte {
	b := make([]byte, n)
	const h = 2 << 20
	s := uintptr(unsafe.Pointer(&b[0]))
	lo := (s + h - 1) &^ (h - 1)
	hi := (s + uintptr(n)) &^ (h - 1)
	if hi > lo {
		unix.Madvise(b[lo-s:hi-s], unix.MADV_HUGEPAGE)
	}
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

type pad struct {
	v atomic.Int64
	_ [56]byte
}

func main() {
	runtime.GOMAXPROCS(2)
	for _, n := range []int{256 << 20, 64 << 20, 1 << 20} {
		src, dst := alloc(n), alloc(n)
		for _, chunk := range []int{32 << 10, 64 << 10, 128 << 10} {
			for _, depth := range []int{2, 4} {
				if chunk*depth > 512<<10 {
					continue
				}
				ring := alloc(chunk * depth)
				var prod, cons pad
				best := time.Hour
				for t := 0; t < 5; t++ {
					prod.v.Store(0)
					cons.v.Store(0)
					var wg sync.WaitGroup
					wg.Add(2)
					t0 := time.Now()
					nch := (n + chunk - 1) / chunk
					go func() { // producer: src -> ring
						runtime.LockOSThread()
						defer wg.Done()
						for i := 0; i < nch; i++ {
							for int64(i)-cons.v.Load() >= int64(depth) {
							}
							o := i * chunk
							m := min(chunk, n-o)
							s := (i % depth) * chunk
							copy(ring[s:s+m], src[o:o+m])
							prod.v.Store(int64(i + 1))
						}
					}()
					go func() { // consumer: ring -> dst
						runtime.LockOSThread()
						defer wg.Done()
						for i := 0; i < nch; i++ {
							for prod.v.Load() <= int64(i) {
							}
							o := i * chunk
							m := min(chunk, n-o)
							s := (i % depth) * chunk
							ntcopy(dst[o:o+m], ring[s:s+m])
							cons.v.Store(int64(i + 1))
						}
					}()
					wg.Wait()
					best = min(best, time.Since(t0))
				}
				fmt.Printf("n=%-10d chunk=%-7d depth=%d %10v %.1f GB/s\n", n, chunk, depth, best, float64(n)/float64(best.Nanoseconds()))
			}
		}
		best := time.Hour
		for t := 0; t < 5; t++ {
			t0 := time.Now()
			copy(dst, src)
			best = min(best, time.Since(t0))
		}
		fmt.Printf("n=%-10d plain copy %v %.1f GB/s\n", n, best, float64(n)/float64(best.Nanoseconds()))
	}
}
