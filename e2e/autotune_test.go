package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hvdrun --autotune with hvd.torch's DistributedOptimizer at np 3: the
// flags reach the workers, rank 0 writes the CSV log — a header, one row
// per trial (the configured start, then the first seeds) and the best as
// the last row — and training stays in step on every rank while the
// settings change under it.
func TestAutotunePythonTorch(t *testing.T) {
	pkg := pythonPackage(t)
	log := filepath.Join(t.TempDir(), "autotune.csv")
	const trials = 4
	out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg), "-np", "3", "--autotune", "--autotune-log-file", log,
		"--autotune-warmup-samples", "0", "--autotune-steps-per-sample", "2", "--autotune-bayes-opt-max-samples", strconv.Itoa(trials),
		python, "testdata/autotune_train.py", strconv.Itoa(trials+1))
	if code != 0 || strings.Count(out, "parameters identical on all ranks") != 3 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 60))
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != trials+2 || lines[0] != "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,tensor_fusion_threshold,score" {
		t.Fatalf("log:\n%s", b)
	}
	// (cycle ms, threshold MiB) of the start (the default 128 MiB, capped to
	// the search box's 64) and the first seeds, in order.
	want := [][2]string{{"0", "64"}, {"5", "4"}, {"25", "32"}, {"1", "16"}}
	best, top, topRow := lines[len(lines)-1], -1.0, ""
	for i, l := range lines[1 : trials+1] {
		f := strings.Split(l, ",")
		if len(f) != 7 || f[0] != "0" || f[1] != "0" || f[2] != "0" || f[3] != "1" || f[4] != want[i][0] || f[5] != want[i][1] {
			t.Fatalf("trial %d: %q, want cycle %s ms, threshold %s MiB, no hierarchy on one host\n%s", i, l, want[i][0], want[i][1], b)
		}
		sc, err := strconv.ParseFloat(f[6], 64)
		if err != nil || sc <= 0 {
			t.Fatalf("trial %d: score %q", i, f[6])
		}
		if sc > top {
			top, topRow = sc, l
		}
	}
	if best != topRow {
		t.Fatalf("the last row %q is not the top-scoring trial %q\n%s", best, topRow, b)
	}
	t.Logf("%s", b)
}
