package launch

// Monitor is told what the launcher does, for the job's status page
// (hvdrun --metrics-port, internal/observe): processes started and exited,
// the worlds of an elastic job and the driver's messages. Runtime.Monitor
// may be nil. Calls come from the supervising goroutine; implementations
// must not block.
type Monitor interface {
	// World: a world of size ranks, epoch 0 for a static job.
	World(size, epoch int)
	RankStarted(rank int, host string, pid int)
	// RankExited: how rank's process ended; failed unless it exited 0.
	RankExited(rank int, reason string, failed bool)
	// Event: a line of the job's history (the elastic driver's messages:
	// hosts joining and leaving, blacklisting, resets, and why).
	Event(text string)
}

// monitor returns the Runtime's Monitor or one that does nothing.
func (j *Job) monitor() Monitor {
	if j.rt.Monitor == nil {
		return nopMonitor{}
	}
	return j.rt.Monitor
}

type nopMonitor struct{}

func (nopMonitor) World(int, int)               {}
func (nopMonitor) RankStarted(int, string, int) {}
func (nopMonitor) RankExited(int, string, bool) {}
func (nopMonitor) Event(string)                 {}
