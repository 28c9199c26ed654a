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

// kernelSleepBlocking is kernelSleep through the Go scheduler's syscall
// path: the goroutine's processor is left in the syscall state, so that
// another thread of the runtime (the engine's, waking from its own sleep)
// takes it back at once instead of waiting for the monitor to retake it.
func kernelSleepBlocking(w *atomic.Uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, 0, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// kernelWakeBlocking is kernelWake through the syscall path: a woken
// thread that needs this thread's processor (a caller returning into Go)
// may take it while the wake is in the kernel.
func kernelWakeBlocking(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, 1<<30, 0, 0, 0)
}
