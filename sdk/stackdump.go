package sdk

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// A debugging aid for hung jobs (docs/compat.md, hvd's own variables): with
// HVD_STACKS_ON_SIGNAL=1 in its environment (a knob, knobs.go), a process that runs hvd writes
// the stack of every goroutine to stderr each time it receives SIGUSR2, and
// goes on. SIGQUIT does the same for a Go program but ends it, and in a
// Python process the hvd library (c-shared) does not see SIGQUIT at all;
// SIGUSR1 is left to Python (faulthandler.register(signal.SIGUSR1) dumps
// the Python threads). The e2e tests set it and signal the workers of a
// job that stops making progress.

// StackDumpSignal is the signal HVD_STACKS_ON_SIGNAL=1 answers.
const StackDumpSignal = syscall.SIGUSR2

var stackDumpOnce sync.Once

// installStackDump is startStackDump with HVD_STACKS_ON_SIGNAL as the knob
// table reads it from getenv (for a process that does not Start: tests).
func installStackDump(getenv func(string) (string, bool)) {
	k, _ := readKnobs(getenv)
	startStackDump(k.stacks)
}

// startStackDump starts the SIGUSR2 handler once per process when on;
// Start calls it with the parsed HVD_STACKS_ON_SIGNAL.
func startStackDump(on bool) {
	if !on {
		return
	}
	stackDumpOnce.Do(func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, StackDumpSignal)
		go func() {
			for range c {
				writeStacks(os.Stderr)
			}
		}()
	})
}

// writeStacks writes every goroutine's stack to f between marker lines
// that name the process.
func writeStacks(f *os.File) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	fmt.Fprintf(f, "hvd: goroutine stacks of pid %d at %s (HVD_STACKS_ON_SIGNAL):\n%s\nhvd: end of goroutine stacks of pid %d\n",
		os.Getpid(), time.Now().Format(time.TimeOnly+".000"), buf, os.Getpid())
}
