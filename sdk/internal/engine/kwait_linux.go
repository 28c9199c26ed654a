package engine

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const haveKernelWait = true

const (
	futexWaitPrivate = 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 129 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// kernelSleep blocks while *w == 0, at most d, in the kernel. RawSyscall:
// the Go scheduler is not told, so the calling goroutine keeps its thread
// and its processor, and its wake-up is the kernel's alone.
func kernelSleep(w *atomic.Uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, 0, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// kernelWake wakes every thread in kernelSleep on w.
func kernelWake(w *atomic.Uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, 1<<30, 0, 0, 0)
}
