package sdk

import (
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"
)

var gcSink []byte

// heapGoal is the heap size at which the collector will next finish a
// cycle, right after a forced one.
func heapGoal() uint64 {
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// The ballast spaces the collector's cycles. Its mechanism is the heap
// goal: a ballast of B raises the goal by about 2B (GOGC 100), which is
// deterministic. Its effect is fewer cycles for the same garbage: garbage
// of four times the live heap runs several cycles without a ballast and
// none or almost none with one of twice that garbage. Counting cycles
// depends on the background mark workers getting a CPU (CI's loaded 2-core
// VM finished 1 of the usual 5 in about one try in a hundred), so the
// count is taken as the best of three tries.
func TestBallastSpacesCollections(t *testing.T) {
	defer setBallast(0)
	setBallast(0)
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	garbage := 4 * max(m.HeapAlloc, 4<<20)
	mb := int(2*garbage>>20) + 1

	goalWithout := heapGoal()
	setBallast(mb)
	goalWith := heapGoal()
	setBallast(0)
	if raised := int64(goalWith) - int64(goalWithout); raised < int64(mb)<<20 {
		t.Fatalf("a %d MiB ballast raised the heap goal by %d bytes (%d -> %d), want at least the ballast", mb, raised, goalWithout, goalWith)
	}

	cycles := func() uint32 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		n0 := m.NumGC
		for i := uint64(0); i < garbage>>10; i++ {
			gcSink = make([]byte, 1024)
		}
		runtime.ReadMemStats(&m)
		return m.NumGC - n0
	}
	var without, with uint32
	for try := 0; try < 3; try++ {
		setBallast(0)
		without = cycles()
		setBallast(mb)
		with = cycles()
		if without >= 2 && with*2 < without {
			t.Logf("collections during %d MiB of garbage: %d without, %d with a %d MiB ballast (heap goal %d -> %d)", garbage>>20, without, with, mb, goalWithout, goalWith)
			return
		}
	}
	t.Fatalf("collections during %d MiB of garbage, last of 3 tries: %d without a ballast, %d with one of twice that (want at least 2, and under half)", garbage>>20, without, with)
}
