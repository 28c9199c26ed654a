package launch

import (
	"os/exec"
	"syscall"
	"testing"
	"unsafe"
)

func TestSiginfoLayout(t *testing.T) {
	if got := unsafe.Sizeof(siginfoChild{}); got != 128 {
		t.Errorf("sizeof(siginfo_t) = %d, want 128", got)
	}
	if got, want := unsafe.Offsetof(siginfoChild{}.Pid), uintptr(12+4*is64bit); got != want {
		t.Errorf("offset of si_pid = %d, want %d", got, want)
	}
}

// TestWaitExited checks the status and that the child is left unreaped.
func TestWaitExited(t *testing.T) {
	tests := []struct {
		script string
		check  func(syscall.WaitStatus) bool
	}{
		{"exit 0", func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 0 }},
		{"exit 3", func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 3 }},
		{"kill -9 $$", func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGKILL }},
		{"kill -TERM $$", func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGTERM }},
	}
	for _, tt := range tests {
		cmd := exec.Command("sh", "-c", tt.script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ws, err := waitExited(cmd.Process.Pid)
		if err != nil || !tt.check(ws) {
			t.Errorf("%s: waitExited = %#x (%v)", tt.script, ws, err)
		}
		// Still a zombie: the pid is reserved until Wait reaps it.
		if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
			t.Errorf("%s: child was reaped by waitExited: %v", tt.script, err)
		}
		cmd.Wait()
		if got := cmd.ProcessState.Sys().(syscall.WaitStatus); got != ws {
			t.Errorf("%s: Wait status %#x, waitExited said %#x", tt.script, got, ws)
		}
	}
}
