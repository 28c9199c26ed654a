package sdk

import (
	"runtime"
	"testing"
)

var gcSink []byte

// The ballast spaces the collector's cycles: 16 MiB of small garbage runs
// several cycles over this test binary's small heap, and none or almost
// none with a 64 MiB ballast.
func TestBallastSpacesCollections(t *testing.T) {
	defer setBallast(0)
	cycles := func() uint32 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		n0 := m.NumGC
		for i := 0; i < 16<<10; i++ {
			gcSink = make([]byte, 1024)
		}
		runtime.ReadMemStats(&m)
		return m.NumGC - n0
	}
	setBallast(0)
	without := cycles()
	setBallast(64)
	with := cycles()
	if without < 2 || with*2 > without {
		t.Fatalf("collections during 16 MiB of garbage: %d without a ballast, %d with 64 MiB (want at least 2, and under half)", without, with)
	}
	t.Logf("collections: %d without, %d with", without, with)
}
