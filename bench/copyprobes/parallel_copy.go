//go:build ignore

// Probe for issue 18 (see README.md here; output in bench/results/2026-12-01-raw18/probes/results.txt): go run this file (pipeline_copy.go with pipeline_nt.go and pipeline_nt_amd64.s from a scratch module).
package main

import (
	"fmt"
	"runtime"
	"sync"
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
	unix.Madvise(b[lo-s:hi-s], unix.MADV_HUGEPAGE)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func main() {
	runtime.GOMAXPROCS(2)
	for _, n := range []int{256 << 20, 64 << 20} {
		for _, par := range []int{1, 2} {
			srcs := make([][]byte, par)
			dsts := make([][]byte, par)
			for i := range par {
				srcs[i], dsts[i] = alloc(n/par), alloc(n/par)
			}
			best := time.Hour
			for t := 0; t < 5; t++ {
				var wg sync.WaitGroup
				t0 := time.Now()
				for i := range par {
					wg.Add(1)
					go func() { defer wg.Done(); copy(dsts[i], srcs[i]) }()
				}
				wg.Wait()
				best = min(best, time.Since(t0))
			}
			fmt.Printf("n=%d par=%d %v %.1f GB/s\n", n, par, best, float64(n)/float64(best.Nanoseconds()))
		}
	}
}
