package sdk

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The first stall warning comes when a tensor has waited
// HOROVOD_STALL_CHECK_TIME_SECONDS, not up to twice that (issue 29: with
// checks only every StallWarning, a tensor submitted just after a check was
// reported at the check after next; the default 60 s warning then often
// never came).
func TestStallWarningOnTime(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 4 s")
	}
	const warn = 2 * time.Second
	var mu sync.Mutex
	var first time.Time
	ws := mustWorlds(t, 2, worldOpts{
		env: map[string]string{"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"},
		logf: func(f string, a ...any) {
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() && strings.Contains(fmt.Sprintf(f, a...), "allreduce.late (missing ranks: [1])") {
				first = time.Now()
			}
		},
	})
	time.Sleep(warn / 4) // the engines' first check is due before the tensor has waited warn
	submitted := time.Now()
	each(t, ws, func(w *World) error {
		if w.Rank() == 1 {
			time.Sleep(2 * warn)
		}
		_, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Name: "late"})
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if first.IsZero() {
		t.Fatalf("no stall warning naming rank 1 within %v (HOROVOD_STALL_CHECK_TIME_SECONDS %v)", 2*warn, warn)
	}
	if d := first.Sub(submitted); d < warn-100*time.Millisecond || d > warn+warn/2 {
		t.Errorf("the first stall warning came %v after the tensor was submitted, want about %v", d.Round(time.Millisecond), warn)
	}
}
