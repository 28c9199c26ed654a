// Package cpubind pins a rank's threads to one CPU (HVD_BIND_TO=core or
// auto, hvdrun --bind-to); the sdk calls it at every Init, once the rank's
// local rank is known.
package cpubind

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// The process's CPU mask before the first binding: every later Init
// (an elastic world, a re-init) decides from it, and restores it when it
// no longer binds.
var (
	mu       sync.Mutex
	original unix.CPUSet
	read     bool
	narrowed bool
)

// Bind implements HVD_BIND_TO (hvdrun --bind-to):
//   - core: local rank i runs on the i-th CPU of the process's allowed set,
//     as mpirun binds ranks for np <= 2; nothing is bound when local ranks
//     outnumber the allowed CPUs (binding would stack ranks on cores);
//   - auto (hvdrun's default): the same, only when the local ranks are
//     exactly as many as the allowed CPUs, so that no rank gives up a core
//     it could have used;
//   - none: nothing.
//
// Every thread of the process is moved (a framework may have started its
// own before Init). A process bound by an earlier Init that no longer
// binds gets its original mask back. changed reports whether the mask was
// set (to one CPU, or back).
func Bind(mode string, localRank, localSize int, logf func(string, ...any)) (changed bool, err error) {
	if mode != "core" && mode != "auto" {
		return false, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if !read {
		if err := unix.SchedGetaffinity(0, &original); err != nil {
			return false, fmt.Errorf("hvd: HVD_BIND_TO=%s: read the CPU mask: %w", mode, err)
		}
		read = true
	}
	cpus := CPUs(original)
	if localSize > len(cpus) || (mode == "auto" && localSize != len(cpus)) || localRank < 0 || localRank >= localSize {
		if mode == "core" {
			logf("hvd: HVD_BIND_TO=core: %d ranks on this host but %d CPUs allowed; not binding", localSize, len(cpus))
		}
		if !narrowed {
			return false, nil
		}
		narrowed = false
		return true, setAll(&original)
	}
	var one unix.CPUSet
	one.Set(cpus[localRank])
	if err := setAll(&one); err != nil {
		return false, fmt.Errorf("hvd: HVD_BIND_TO=%s: bind to CPU %d: %w", mode, cpus[localRank], err)
	}
	narrowed = true
	return true, nil
}

// CPUs lists the CPUs of a mask in ascending order.
func CPUs(set unix.CPUSet) []int {
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// setAll gives every thread of the process the mask (the calling one's
// error is returned; another thread may have exited meanwhile).
func setAll(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return unix.SchedSetaffinity(0, set)
	}
	self := unix.Gettid()
	var selfErr error
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			if err := unix.SchedSetaffinity(tid, set); tid == self {
				selfErr = err
			}
		}
	}
	return selfErr
}
