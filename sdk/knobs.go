package sdk

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// knobs are the engine's runtime settings, read once at Start from
// Horovod's environment variables.
type knobs struct {
	fusion        int64         // HOROVOD_FUSION_THRESHOLD, bytes (default 128 MiB, 0 disables)
	cycle         time.Duration // HOROVOD_CYCLE_TIME, ms (accepted; see docs/compat.md)
	cache         int           // HOROVOD_CACHE_CAPACITY (default 1024)
	stallWarn     time.Duration // HOROVOD_STALL_CHECK_TIME_SECONDS (60; 0 with HOROVOD_STALL_CHECK_DISABLE)
	stallShutdown time.Duration // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0 = never)
	timeline      string        // HOROVOD_TIMELINE: a path, or DYNAMIC
	markCycles    bool          // HOROVOD_TIMELINE_MARK_CYCLES
	hierAllreduce bool          // HOROVOD_HIERARCHICAL_ALLREDUCE (default on here; see backend.go)
	hierAllgather bool          // HOROVOD_HIERARCHICAL_ALLGATHER (default on here)
}

// hvdBool parses Horovod's boolean knobs the way Horovod does: an integer
// > 0 is on (so "true" is off there); we also accept true/yes/on and say so
// in docs/compat.md.
func hvdBool(v string) bool {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		return n > 0
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "yes", "on":
		return true
	}
	return false
}

func readKnobs(getenv func(string) (string, bool)) (knobs, error) {
	k := knobs{fusion: 128 << 20, cycle: time.Millisecond, cache: 1024, stallWarn: 60 * time.Second, hierAllreduce: true, hierAllgather: true}
	if v, ok := getenv("HOROVOD_HIERARCHICAL_ALLREDUCE"); ok && strings.TrimSpace(v) != "" {
		k.hierAllreduce = hvdBool(v)
	}
	if v, ok := getenv("HOROVOD_HIERARCHICAL_ALLGATHER"); ok && strings.TrimSpace(v) != "" {
		k.hierAllgather = hvdBool(v)
	}
	num := func(name string, f func(float64) error) error {
		v, ok := getenv(name)
		if !ok || strings.TrimSpace(v) == "" {
			return nil
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || x < 0 {
			return fmt.Errorf("%w: %s=%q is not a non-negative number", ErrInvalidArgument, name, v)
		}
		return f(x)
	}
	secs := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	errs := []error{
		num("HOROVOD_FUSION_THRESHOLD", func(x float64) error { k.fusion = int64(x); return nil }),
		num("HOROVOD_CYCLE_TIME", func(x float64) error { k.cycle = time.Duration(x * float64(time.Millisecond)); return nil }),
		num("HOROVOD_CACHE_CAPACITY", func(x float64) error { k.cache = int(x); return nil }),
		num("HOROVOD_STALL_CHECK_TIME_SECONDS", func(x float64) error { k.stallWarn = secs(x); return nil }),
		num("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", func(x float64) error { k.stallShutdown = secs(x); return nil }),
	}
	for _, err := range errs {
		if err != nil {
			return k, err
		}
	}
	if v, ok := getenv("HOROVOD_STALL_CHECK_DISABLE"); ok && hvdBool(v) {
		k.stallWarn, k.stallShutdown = 0, 0
	}
	if k.stallShutdown > 0 && k.stallShutdown < k.stallWarn {
		k.stallShutdown = 0 // Horovod: shutdown below the warning time only warns
	}
	k.timeline, _ = getenv("HOROVOD_TIMELINE")
	if v, ok := getenv("HOROVOD_TIMELINE_MARK_CYCLES"); ok {
		k.markCycles = hvdBool(v)
	}
	return k, nil
}
