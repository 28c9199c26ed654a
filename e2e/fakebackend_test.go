package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A backend is its package plus one registration: libhvd.so built with the
// tag hvd_fakebackend (backends/builtin/fake.go imports
// backends/internal/fakebackend; nothing in sdk names it) runs a Python job
// on HVD_BACKEND=fake at np 3, a global allreduce and a broadcast, and one
// on a set that excludes rank 1; the timeline shows the fake backend's label.
// The same job on the ordinary library fails at init naming the choices.
func TestFakeBackendPythonJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds its own libhvd.so (-short)")
	}
	plain := numpyPackage(t) // skips without numpy
	dir := filepath.Join(binDir, "python-fake")
	if err := os.CopyFS(filepath.Join(dir, "hvd"), os.DirFS("../python/hvd")); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-tags", "hvd_fakebackend", "-buildmode=c-shared", "-o", filepath.Join(dir, "hvd", "libhvd.so"), "../cmd/libhvd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building libhvd.so with the fake backend: %v\n%s", err, out)
	}
	timeline := filepath.Join(t.TempDir(), "timeline.json")
	py := filepath.Join(t.TempDir(), "job.py")
	if err := os.WriteFile(py, []byte(fakeJob), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := hvdrun(t, 2*time.Minute, pyEnv(dir, "HVD_BACKEND=fake", "HOROVOD_TIMELINE="+timeline), "-np", "3", python, py)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 60))
	}
	for r := range 3 {
		if !strings.Contains(out, fmt.Sprintf("fake-ok %d", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, tail(out, 60))
		}
	}
	tl, err := os.ReadFile(timeline)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tl), "FAKE_ALLREDUCE") || strings.Contains(string(tl), "SHM_ALLREDUCE") {
		t.Errorf("the timeline does not show the fake backend serving the allreduce (FAKE_ALLREDUCE and no SHM_ALLREDUCE):\n%.2000s", tl)
	}

	// Without the registration line the choice does not exist.
	out, code = hvdrun(t, time.Minute, pyEnv(plain, "HVD_BACKEND=fake"), "-np", "2", python, py)
	if code == 0 || !strings.Contains(out, "HVD_BACKEND") || !strings.Contains(out, "want one of auto") {
		t.Errorf("HVD_BACKEND=fake on the ordinary library: exit %d:\n%s", code, tail(out, 30))
	}
}

const fakeJob = `
import numpy as np
import hvd.numpy as hvd
evens = hvd.ProcessSet([0, 2])
hvd.init(process_sets=[evens])
n = hvd.size()
x = np.full(5, hvd.rank() + 1, dtype=np.float32)
got = hvd.allreduce(x, op=hvd.Sum, name="x")
assert (got == n * (n + 1) / 2).all(), got
b = hvd.broadcast(np.array([hvd.rank()], dtype=np.int64), root_rank=2, name="b")
assert b[0] == 2, b
if hvd.rank() != 1:
    e = hvd.allreduce(np.array([hvd.rank()], dtype=np.float64), op=hvd.Sum, name="e", process_set=evens)
    assert e[0] == 2, e
print("fake-ok", hvd.rank(), flush=True)
hvd.shutdown()
`
