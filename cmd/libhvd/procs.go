package main

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/sdk"
)

// The Go runtime in a framework process (issue 27).
//
// In a PyTorch or TensorFlow process the Go runtime only communicates: the
// framework's threads compute. With more than one processor (Go's default:
// one per CPU), the runtime's monitor thread (sysmon) ticks every 20 µs
// (about 100 µs on these VMs) for 10–20 ms after each burst of calls from
// Python: the calling thread returns to C still holding a processor, which
// the monitor takes back only after 10 ms while another one is idle, and
// each take-back restarts its fast ticks. When every core computes, each
// tick preempts a framework thread. Measured (np 2, 1.07 M-parameter MLP,
// 100 ms steps): ~135 monitor wake-ups per step and rank (perf), and the
// forward pass 2–4 % slower than the same model's without communication
// in the same process. With one processor, the one a thread keeps in C is
// taken back at the next tick (none other is idle): the monitor thread's
// context switches fell from 3,351 to 954 in 30 steps.
//
// One processor costs the short steps, though: the engine goroutine and
// the caller then take turns on it, and some of those turns wait for the
// monitor (a 5.5 k-parameter step, 1.6 ms, was about 10 % slower in two
// comparisons of three). So the processor count follows the step: the
// runtime's default while bursts of collectives come less than longGap
// apart, one processor once settle bursts in a row came after at least
// longGap of silence (the computation between steps is long), and back. A
// gap is the time since the library last returned from a launch or a wait
// (what the caller spent computing); a burst is a launch after a gap of at
// least burstGap. A GOMAXPROCS the user sets (before init, even from
// Python) is kept as is.
const (
	burstGap = time.Millisecond
	longGap  = 10 * time.Millisecond
	settle   = 4
)

// procsGovernor decides the processor count from the launch times.
type procsGovernor struct {
	mu     sync.Mutex
	on     bool         // false: the user's GOMAXPROCS, never changed
	last   atomic.Int64 // when the last launch or wait returned (ns since start); written without mu by left
	run    int          // bursts in a row of the kind that would switch
	narrow bool         // running on one processor
}

// observe records a launch at now and reports whether to switch, and to
// which: narrow (one processor) or not (the runtime's default).
func (g *procsGovernor) observe(now time.Duration) (change, narrow bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.on {
		return false, false
	}
	gap := now - time.Duration(g.last.Swap(int64(now)))
	if gap < burstGap {
		return false, false // the same burst
	}
	if long := gap >= longGap; long != g.narrow {
		g.run++
	} else {
		g.run = 0
	}
	if g.run < settle {
		return false, false
	}
	g.run = 0
	g.narrow = !g.narrow
	return true, g.narrow
}

// left records that a launch or a wait returned at now (every wait and
// release calls it: an atomic store, no lock).
func (g *procsGovernor) left(now time.Duration) { g.last.Store(int64(now)) }

// isNarrow reports the processor count last decided.
func (g *procsGovernor) isNarrow() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.narrow
}

// reset starts over at init: on unless the user set GOMAXPROCS, wide.
func (g *procsGovernor) reset(on bool, now time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.on, g.run, g.narrow = on, 0, false
	g.last.Store(int64(now))
}

var (
	governor  procsGovernor
	procsSwap sync.Mutex // one GOMAXPROCS change at a time
	started   = time.Now()
)

// setProcs runs at every init: the user's GOMAXPROCS as it is now (Python
// may have set it after the runtime started), else the runtime's default
// and the governor.
func setProcs() {
	procsSwap.Lock()
	defer procsSwap.Unlock()
	if n := sdk.UserProcs(os.Getenv("GOMAXPROCS")); n > 0 {
		governor.reset(false, time.Since(started))
		runtime.GOMAXPROCS(n)
		return
	}
	governor.reset(true, time.Since(started))
	runtime.SetDefaultGOMAXPROCS()
}

// returned is deferred by every call that starts collectives or waits for
// them.
func returned() { governor.left(time.Since(started)) }

// launched is called by every call that starts collectives. Two callers
// deciding at once may reach procsSwap in either order: each applies the
// state decided last, not its own.
func launched() {
	if change, _ := governor.observe(time.Since(started)); !change {
		return
	}
	procsSwap.Lock()
	defer procsSwap.Unlock()
	if governor.isNarrow() {
		runtime.GOMAXPROCS(1)
	} else {
		runtime.SetDefaultGOMAXPROCS()
	}
}
