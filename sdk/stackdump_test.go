package sdk

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The child half of TestStackDumpOnSignal: it installs the handler as
// Start does and waits to be signalled.
func TestStackDumpChild(t *testing.T) {
	if os.Getenv("HVD_TEST_STACKDUMP_CHILD") != "1" {
		t.Skip("run by TestStackDumpOnSignal")
	}
	installStackDump(os.LookupEnv)
	os.Stdout.WriteString("ready\n")
	time.Sleep(20 * time.Second)
}

// HVD_STACKS_ON_SIGNAL=1: SIGUSR2 writes every goroutine's stack to stderr
// and the process goes on (it answers a second signal too).
func TestStackDumpOnSignal(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStackDumpChild$", "-test.v")
	cmd.Env = append(os.Environ(), "HVD_TEST_STACKDUMP_CHILD=1", "HVD_STACKS_ON_SIGNAL=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "ready") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(15 * time.Second):
		t.Fatal("the child did not start")
	}
	lines := make(chan string, 4096)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for i := 0; i < 2; i++ {
		if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatalf("signal %d: %v", i, err)
		}
		var got []string
		deadline := time.After(10 * time.Second)
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child's stderr ended after signal %d: %s", i, strings.Join(got, "\n"))
				}
				got = append(got, l)
				if strings.HasPrefix(l, "hvd: end of goroutine stacks") {
					break read
				}
			case <-deadline:
				t.Fatalf("no stacks within 10 s of signal %d: %s", i, strings.Join(got, "\n"))
			}
		}
		all := strings.Join(got, "\n")
		for _, want := range []string{"hvd: goroutine stacks of pid", "TestStackDumpChild"} {
			if !strings.Contains(all, want) {
				t.Errorf("signal %d: no %q in:\n%s", i, want, all)
			}
		}
	}
}
