package launch

// The end-of-job and next-world rules of docs/elastic.md as pure functions
// of what the driver knows; the driver (elastic_run.go) only gathers the
// inputs and carries the verdicts out.

// WorkerOutcome is what the driver knows of one worker of the current world.
type WorkerOutcome int

const (
	Running   WorkerOutcome = iota
	Succeeded               // exited 0
	Failed                  // exited non-zero or was killed, not by the driver
	Stopped                 // stopped by the driver (its host was blacklisted)
)

// ExitVerdict is the driver's decision after a worker of the current world
// exited.
type ExitVerdict int

const (
	KeepWaiting     ExitVerdict = iota // others of the world still run
	JobSucceeds                        // the whole world has exited, at least one 0, none failed
	FailWithFirst                      // the world has exited; the job fails with its first failure
	FailWithThis                       // a failure after a worker finished: the job is over, and failed
	FailEveryWorker                    // every worker of the world failed
	FailEveryHost                      // every host is blacklisted now
	ResetWorld                         // blacklist done: stop the host's workers, make the next world
)

// DecideExit applies the rules after a worker of the current world exited:
// world holds the outcome of every worker of the world, the one that just
// exited included; failed says whether that one failed; allHostsOut whether
// every discovered host is blacklisted once its host is (it only matters
// when failed). A worker that exits 0 means training is over: from then on
// the job only waits for the rest of the world (Horovod's "any success
// stops the job", without horovod#3852's early stop), and fails if one of
// them fails.
func DecideExit(world []WorkerOutcome, failed, allHostsOut bool) ExitVerdict {
	var running, succeeded, failures int
	for _, o := range world {
		switch o {
		case Running:
			running++
		case Succeeded:
			succeeded++
		case Failed:
			failures++
		}
	}
	switch {
	case !failed && running > 0:
		return KeepWaiting
	case !failed && failures > 0:
		return FailWithFirst
	case !failed:
		return JobSucceeds
	case succeeded > 0:
		return FailWithThis
	case failures == len(world):
		return FailEveryWorker
	case allHostsOut:
		return FailEveryHost
	}
	return ResetWorld
}

// WorldVerdict is the driver's decision when a new world is wanted (a
// failure, or discovery changed the assignment).
type WorldVerdict int

const (
	PublishWorld   WorldVerdict = iota
	WaitForSlots                // fewer than --min-np slots: wait, up to --elastic-timeout
	FailResetLimit              // --reset-limit resets have happened
	FailNoSurvivor              // no live worker of the current world is in the next one
)

// DecideWorld decides about a wanted world of slots workers (the assignment
// over the available hosts) after resets resets (resetLimit < 0: no limit).
// live counts the live workers of the current world, survivors those of
// them that are in the wanted world. The first world (first) only needs its
// slots; -np is checked before it.
func DecideWorld(first bool, slots, minNP, live, survivors, resets, resetLimit int) WorldVerdict {
	switch {
	case first:
		return PublishWorld
	case resetLimit >= 0 && resets >= resetLimit:
		return FailResetLimit
	case live == 0:
		return FailNoSurvivor // nobody to wait for
	case slots < minNP:
		// Even when no survivor is in it: discovery may have printed nothing
		// once, and the hosts come back within the timeout.
		return WaitForSlots
	case survivors == 0:
		return FailNoSurvivor
	}
	return PublishWorld
}

// DecidePartition decides a partition where both sides still reach the
// store (docs/elastic.md, "Partitions"): the workers on each side fail their
// collectives with the other side and report it, so every report names a
// worker that reported too, and the rule that ignores such reports (a
// survivor blamed by another) would leave the job waiting forever. reports
// maps each reporter of the world to the worker it blames ("" none); rank
// and host give a worker's rank and host. Rank 0's side survives (the
// lowest-ranked reporter that blames anyone, normally rank 0: it holds the
// state the next world syncs from): when it blames a worker on another
// host, and that worker or another of that host blames a worker of its
// host, the blamed worker is returned: the driver cuts off its host. ""
// when the reports do not show such a mutual blame.
func DecidePartition(reports map[string]string, rank func(string) int, host func(string) string) string {
	first := ""
	for r, c := range reports {
		if c == "" || rank(r) < 0 || rank(c) < 0 {
			continue
		}
		if first == "" || rank(r) < rank(first) {
			first = r
		}
	}
	if first == "" {
		return ""
	}
	blamed := reports[first]
	if _, reported := reports[blamed]; !reported || host(blamed) == host(first) {
		return ""
	}
	for r, c := range reports {
		if c != "" && host(r) == host(blamed) && host(c) == host(first) {
			return blamed
		}
	}
	return ""
}
