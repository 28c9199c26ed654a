package split

import (
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
)

// The memory table of the default MLP (16→64→64→4, cut 0–1 | 2–4): every
// layer's input kept per sample, the micro-batches each schedule holds.
func TestMemoryTable(t *testing.T) {
	for _, c := range []struct {
		sched      spec.Schedule
		held0, act string
	}{
		{spec.OneFOneB, "| 0 | 8.5 KiB | 320 B | 2 | 5.0 KiB |", "| 1 | 34.5 KiB | 768 B | 1 | 6.0 KiB |"},
		{spec.GPipe, "| 0 | 8.5 KiB | 320 B | 4 | 10.0 KiB |", "| 1 | 34.5 KiB | 768 B | 4 | 24.0 KiB |"},
	} {
		s := spec.Default(spec.PyTorch)
		s.Parallel = &spec.Parallel{Stages: 2, DataParallel: 2, MicroBatches: 4, Schedule: c.sched}
		m, err := Catalogue(s)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Generate(s, m)
		if err != nil {
			t.Fatal(err)
		}
		readme := string(res.Files["README.md"])
		for _, want := range []string{"activations at batch 64 (8 rows per micro-batch)", c.held0, c.act} {
			if !strings.Contains(readme, want) {
				t.Errorf("%s: README lacks %q:\n%s", c.sched, want, readme)
			}
		}
	}
}
