package main

import (
	"os"
	"runtime"

	"github.com/hvdorg/hvd/sdk"
)

// The Go runtime in a framework process (issue 27).
//
// In a PyTorch, TensorFlow or MXNet process the Go runtime only
// communicates: the framework's threads compute. libhvd runs it on one
// processor unless the user sets GOMAXPROCS (before init, even from
// Python), which is kept as set.
//
// With more than one processor (Go's default: one per CPU), the runtime's
// monitor thread (sysmon) ticks every 20 µs (about 100 µs on these VMs)
// for 10–20 ms after each burst of calls from Python: the calling thread
// returns to C still holding a processor, which the monitor takes back
// only after 10 ms while another one is idle, and each take-back restarts
// its fast ticks. When every core computes, each tick preempts a framework
// thread (measured, np 2, 1.07 M-parameter MLP: ~135 monitor wake-ups per
// 100 ms step and rank, the forward pass 2–4 % slower than without
// communication). With one processor the one a thread keeps in C is taken
// back at the next tick, and the monitor sleeps until the next call.
//
// Until the sixth session one processor cost the short steps (the engine
// and a caller parked in Go took turns on it, and the caller's turn came
// at the monitor's next retake, ~200 µs), so a governor widened the
// runtime while steps were short. Waits now sleep in the kernel without
// the processor under one processor (sdk.WaitMany: the engine's round
// wakes them), and one processor measured faster or equal on every step
// and small op: the 5.5 k-parameter step 1.10× DDP's against 1.14–1.17×,
// hvd.torch's synchronous 8 B allreduce 14 µs against 55–81, the
// 1.07 M-parameter step the same. A lone 64 MiB allreduce with nothing
// computing beside it is 10–25 % slower; setting GOMAXPROCS undoes it
// (bench/results/2026-12-04-step27f/gomaxprocs.txt).
func setProcs() {
	if n := sdk.UserProcs(os.Getenv("GOMAXPROCS")); n > 0 {
		runtime.GOMAXPROCS(n)
		return
	}
	runtime.GOMAXPROCS(1)
}
