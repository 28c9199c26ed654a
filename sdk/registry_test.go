package sdk

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// The timeline's activity names carry the label of the backend that serves
// the set (backends' registry), not a fixed "TCP".
func TestTimelineLabelFollowsBackend(t *testing.T) {
	for _, c := range []struct{ backend, want, not string }{
		{"tcp", "TCP_ALLREDUCE", "SHM_ALLREDUCE"},
		{"shm", "SHM_ALLREDUCE", "TCP_ALLREDUCE"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			path := t.TempDir() + "/timeline.json"
			ws := mustWorlds(t, 2, worldOpts{env: map[string]string{"HOROVOD_TIMELINE": path, "HVD_BACKEND": c.backend}})
			each(t, ws, func(w *World) error {
				_, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1, 2}), ReduceOptions{Name: "x"})
				return err
			})
			ws[0].Close()
			events, err := timeline.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, e := range events {
				seen[e.Name] = true
			}
			if !seen[c.want] || seen[c.not] {
				t.Errorf("HVD_BACKEND=%s: %s in the timeline: %v, %s: %v", c.backend, c.want, seen[c.want], c.not, seen[c.not])
			}
		})
	}
}

// HVD_BACKEND's choices are the registry's.
func TestBackendKnobFromRegistry(t *testing.T) {
	var row *knobSpec
	for i := range knobTable {
		if knobTable[i].name == "HVD_BACKEND" {
			row = &knobTable[i]
		}
	}
	if row == nil || !slices.Equal(row.choices, backends.Choices()) {
		t.Fatalf("HVD_BACKEND choices %v, registry %v", row.choices, backends.Choices())
	}
	want := "[auto shm tcp]"
	if MPIBuilt() {
		want = "[auto mpi shm tcp]"
	}
	if got := fmt.Sprint(backends.Choices()); got != want {
		t.Errorf("choices %s", got)
	}
	if _, err := parseBackend("hier"); err == nil {
		t.Error("hier is not a choice of its own")
	}

}
