// Package cpubind pins a rank's threads to one CPU (HVD_BIND_TO=core,
// hvdrun --bind-to core); the sdk calls it once the rank's local rank is
// known.
package cpubind

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ToCore implements HVD_BIND_TO=core (hvdrun --bind-to core): local
// rank i runs on the i-th CPU of the process's allowed set, as mpirun binds
// ranks for np <= 2. Every thread of the process is moved (a framework may
// have started its own before Init). Nothing is bound when local ranks
// outnumber the allowed CPUs: binding would stack ranks on cores. bound
// reports whether the process now runs on one CPU.
func ToCore(localRank, localSize int, logf func(string, ...any)) (bound bool, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return false, fmt.Errorf("hvd: HVD_BIND_TO=core: read the CPU mask: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if localSize > len(cpus) {
		logf("hvd: HVD_BIND_TO=core: %d ranks on this host but %d CPUs allowed; not binding", localSize, len(cpus))
		return false, nil
	}
	var one unix.CPUSet
	one.Set(cpus[localRank])
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		err := unix.SchedSetaffinity(0, &one)
		return err == nil, err
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			unix.SchedSetaffinity(tid, &one) // a thread may have exited meanwhile
		}
	}
	return true, nil
}
