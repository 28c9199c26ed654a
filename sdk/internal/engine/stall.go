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

// stallCheck (coordinator) logs, every StallWarning, the tensors that some
// ranks have not submitted for that long, naming those ranks (up to six
// tensors, as Horovod). With StallShutdown it returns ErrStalled once a
// tensor has waited that long; the engine then stops.
func (e *Engine) stallCheck() error {
	if e.coord == nil || e.cfg.StallWarning <= 0 || time.Since(e.lastStall) < e.cfg.StallWarning {
		return nil
	}
	e.lastStall = time.Now()
	stalled := e.coord.Pending(time.Now().Add(-e.cfg.StallWarning))
	if e.cfg.Meter != nil {
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
	e.cfg.Logf("hvd: stall warning: process set %d: these tensors were submitted by some ranks and have waited more than %v for the others:%s",
		e.cfg.SetID, e.cfg.StallWarning, b.String())
	if e.cfg.StallShutdown > 0 {
		if over := e.coord.Pending(time.Now().Add(-e.cfg.StallShutdown)); len(over) > 0 {
			return fmt.Errorf("%w: process set %d: tensors waited more than %v (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) for ranks that never submitted them:%s",
				ErrStalled, e.cfg.SetID, e.cfg.StallShutdown, b.String())
		}
	}
	return nil
}
