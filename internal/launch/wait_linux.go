package launch

import (
	"runtime"
	"strings"
	"syscall"
	"unsafe"
)

// is64bit is 1 on 64-bit platforms, 0 on 32-bit ones.
const is64bit = int(^uint(0) >> 63)

// siginfoChild is the SIGCHLD view of Linux's siginfo_t, as waitid(2) fills
// it (the same layout Go's os package uses internally).
type siginfoChild struct {
	Signo     int32
	ErrnoCode [2]int32 // si_errno, si_code; swapped on MIPS
	_         [is64bit]int32
	Pid       int32
	Uid       uint32
	Status    int32
	_         [128 - (6+is64bit)*4]byte
}

func (s *siginfoChild) code() int32 {
	if strings.HasPrefix(runtime.GOARCH, "mips") {
		return s.ErrnoCode[0]
	}
	return s.ErrnoCode[1]
}

// waitStatus converts the siginfo of an exited child to syscall.WaitStatus.
func (s *siginfoChild) waitStatus() syscall.WaitStatus {
	const (
		cldExited = 1
		cldKilled = 2
		cldDumped = 3
		core      = 0x80
	)
	switch s.code() {
	case cldExited:
		return syscall.WaitStatus(s.Status << 8)
	case cldDumped:
		return syscall.WaitStatus(s.Status) | core
	case cldKilled:
		return syscall.WaitStatus(s.Status)
	}
	return 0
}

// waitExited blocks until child pid has exited and returns its status
// WITHOUT reaping it: the child stays a zombie, so its pid, and with it the
// id of the process group it leads, cannot be reused by an unrelated process
// until the caller reaps it (exec.Cmd.Wait). hvdrun relies on this to signal
// a rank's process group safely at any time before the end of the job.
func waitExited(pid int) (syscall.WaitStatus, error) {
	const pPID = 1 // idtype_t P_PID
	var info siginfoChild
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info)),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch e {
		case 0:
			return info.waitStatus(), nil
		case syscall.EINTR:
			continue
		default:
			return 0, e
		}
	}
}
