// stall.go: the stall inspector (Horovod's StallInspector). It runs on the
// set's coordinator, from the engine's loop (the idle wait has a timeout
// when a check is due), and reads the coordinator's table: which tensors
// some ranks submitted long ago and which ranks have not.

package engine

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// stallEvery is how often the coordinator looks for stalled tensors: a
// tensor is reported within this much (a tenth of StallWarning, at most
// 1 s) of having waited StallWarning. Checking only every StallWarning
// missed a tensor submitted just after a check until the check after next:
// with the default 60 s the first warning came at 60-120 s, or never when
// the wait ended before (issue 29).
func stallEvery(warning time.Duration) time.Duration {
	return max(min(warning/10, time.Second), 10*time.Millisecond)
}

// stallCheck (coordinator) logs, at most every StallWarning, the tensors
// that some ranks have not submitted for that long, naming those ranks (up
// to six tensors, as Horovod); it looks every stallEvery. With
// StallShutdown it returns ErrStalled once a tensor has waited that long;
// the engine then stops.
func (e *Engine) stallCheck() error {
	if e.coord == nil || e.cfg.StallWarning <= 0 || time.Since(e.lastStall) < stallEvery(e.cfg.StallWarning) {
		return nil
	}
	now := time.Now()
	e.lastStall = now
	stalled := e.coord.Pending(now.Add(-e.cfg.StallWarning))
	warn := len(stalled) > 0 && now.Sub(e.lastWarn) >= e.cfg.StallWarning
	if e.cfg.Meter != nil && (warn || len(stalled) == 0) {
		e.cfg.Meter.stalls(stalled, e.cfg.StallWarning)
	}
	if len(stalled) == 0 {
		return nil
	}
	names := make([]string, 0, len(stalled))
	for n := range stalled {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i == 6 {
			fmt.Fprintf(&b, " and %d more", len(names)-6)
			break
		}
		fmt.Fprintf(&b, " %s (missing ranks: %v);", n, stalled[n])
	}
	if warn {
		e.lastWarn = now
		e.cfg.Logf("hvd: stall warning: process set %d: these tensors were submitted by some ranks and have waited more than %v for the others:%s",
			e.cfg.SetID, e.cfg.StallWarning, b.String())
	}
	if e.cfg.StallShutdown > 0 {
		if over := e.coord.Pending(time.Now().Add(-e.cfg.StallShutdown)); len(over) > 0 {
			return fmt.Errorf("%w: process set %d: tensors waited more than %v (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) for ranks that never submitted them:%s",
				ErrStalled, e.cfg.SetID, e.cfg.StallShutdown, b.String())
		}
	}
	return nil
}
