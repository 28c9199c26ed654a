package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A live but stopped rank (SIGSTOP) must not hang the job silently: the
// ranks waiting for it say, while they wait, which rank they wait for and
// on which set and tensor, and fail after HOROVOD_GLOO_TIMEOUT_SECONDS (as
// Horovod's Gloo collectives do), naming it; hvdrun then stops the job,
// the stopped rank included, and nothing is left behind. Under default
// settings (30 s) as well as with a short timeout on TCP at np 3.
func TestStoppedRank(t *testing.T) {
	pkg := pythonPackage(t)
	src, err := os.ReadFile("testdata/stopped_rank.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		np       int
		env      []string
		failBy   time.Duration // the job must have ended by then
		minNotes int
	}{
		{"defaults/shm/np2", 2, nil, 60 * time.Second, 2},
		{"timeout3s/tcp/np3", 3, []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=3", "HVD_BACKEND=tcp"}, 20 * time.Second, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := shmSegments(t)
			script := filepath.Join(t.TempDir(), "stopped_rank.py")
			if err := os.WriteFile(script, src, 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg, tc.env...), "-np", strconv.Itoa(tc.np), python, script)
			took := time.Since(start)
			stopped := tc.np - 1
			if code == 0 || took > tc.failBy {
				t.Fatalf("exit %d after %v (want a failure within %v):\n%s", code, took, tc.failBy, out)
			}
			note := regexp.MustCompile(`process set 0: waited [0-9.]+m?s for rank ` + strconv.Itoa(stopped) + ` in [^\n]*"allreduce\.step"[^\n]*alive but sends nothing`)
			if n := len(note.FindAllString(out, -1)); n < tc.minNotes {
				t.Fatalf("%d notices naming rank %d, set 0 and tensor allreduce.step while waiting (want ≥ %d):\n%s", n, stopped, tc.minNotes, out)
			}
			if !regexp.MustCompile(`rank 0 failed after [0-9.]+ s: HorovodInternalError: [^\n]*rank ` + strconv.Itoa(stopped) + `[^\n]*no progress`).MatchString(out) {
				t.Fatalf("rank 0's error does not name rank %d and the missing progress:\n%s", stopped, out)
			}
			if procs := processesRunning(t, script); len(procs) > 0 {
				t.Fatalf("processes left running: %v", procs)
			}
			if after := shmSegments(t); len(after) > len(before) {
				t.Fatalf("/dev/shm segments left: %v (before: %v)", after, before)
			}
		})
	}
}

// processesRunning lists the pids whose command line mentions marker.
func processesRunning(t *testing.T, marker string) []string {
	t.Helper()
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}
