package sdk

import "sync"

// defaultBallastMB is HVD_GC_BALLAST_MB's default.
const defaultBallastMB = 8

// The collector paces itself by the live heap: it runs each time the heap
// has grown by GOGC % (100) of what the last cycle found live, and at least
// every 4 MiB. The library's own live heap is small while small ops run
// (a few MiB: handles, requests, the response cache), and each op leaves
// a few KiB of garbage, so a batch of ops ran a collection every few
// hundred ops; on these 2-core VMs that was a third of the Go SDK's
// 200 × 4 KiB batch (issue 27: 0.66 → 0.45 ms with GOGC=400, np 2 bound).
// A ballast is memory allocated once and never touched: it counts as live,
// so the collector waits for about as much garbage as the ballast before
// each cycle, and costs no resident memory itself (fresh pages the
// program never writes). With a large live heap (a job's fusion buffers)
// it changes the pacing little. Larger is not better, probably because
// garbage spread over more memory than the caches hold makes each
// allocation slower: the default 8 MiB did as well as 32 or better on
// every bound small-op row and on the batches; 32 was faster only on the
// unbound named 8 B op, a row that moves 2× between passes
// (bench/results/2026-12-03-step27e/ballast_sweep.txt).
var ballast struct {
	sync.Mutex
	b []byte
}

// setBallast makes the process's ballast mb MiB (once: a later call with a
// different size leaves the first, except that 0 drops it).
func setBallast(mb int) {
	ballast.Lock()
	defer ballast.Unlock()
	switch {
	case mb <= 0:
		ballast.b = nil
	case ballast.b == nil:
		ballast.b = make([]byte, mb<<20)
	}
}
