package sdk

import (
	"runtime"
	"testing"
)

var gcSink []byte

// The ballast spaces the collector's cycles: garbage of four times the
// live heap runs several cycles without a ballast, and none or almost none
// with a ballast of twice that garbage.
func TestBallastSpacesCollections(t *testing.T) {
	defer setBallast(0)
	setBallast(0)
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	garbage := 4 * max(m.HeapAlloc, 4<<20)
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
	without := cycles()
	setBallast(int(2*garbage>>20) + 1)
	with := cycles()
	if without < 2 || with*2 > without {
		t.Fatalf("collections during %d MiB of garbage: %d without a ballast, %d with one of twice that (want at least 2, and under half)", garbage>>20, without, with)
	}
	t.Logf("collections during %d MiB of garbage: %d without, %d with", garbage>>20, without, with)
}
