//go:build !linux

package engine

import (
	"sync/atomic"
	"time"
)

// Without futexes WaitKernel waits as Wait does.
const haveKernelWait = false

func kernelSleep(w *atomic.Uint32, d time.Duration)         {}
func kernelWake(w *atomic.Uint32)                           {}
func kernelSleepBlocking(w *atomic.Uint32, d time.Duration) {}
func kernelWakeBlocking(w *atomic.Uint32)                   {}
