package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hvd.run (Horovod's horovod.run) end to end: a Python driver script, run by
// /usr/bin/python3 outside hvdrun, launches its own functions through the
// hvdrun built for this test and prints what came back as JSON. The
// functions live in the script's __main__, so without cloudpickle (Debian's
// python3 has none) they travel by reference and the workers import the
// script as __mp_main__.

const runDriver = `
import json, os, sys
import hvd

def work(tag, scale=1):
    import numpy as np
    import hvd.numpy as h
    h.init()
    total = h.allreduce(np.array([float(h.rank() + 1)]), op=h.Sum)
    out = [h.rank(), h.size(), tag, scale, float(total[0])]
    h.shutdown()
    return out

def fail_on(bad):
    import numpy as np
    import hvd.numpy as h
    h.init()
    if h.rank() == bad:
        raise KeyError('rank %d cannot find its shard' % bad)
    h.allreduce(np.ones(8), name='waits_for_the_failed_rank')
    return 'unreachable'

def exit_hard_on(bad, code):
    import time
    if int(os.environ['HOROVOD_RANK']) == bad:
        os._exit(code)
    time.sleep(120)

if __name__ == '__main__':
    mode, np_ = sys.argv[1], int(sys.argv[2])
    try:
        if mode == 'ok':
            out = {'results': hvd.run(work, args=('tag',), kwargs={'scale': 3}, num_proc=np_)}
        elif mode == 'raise':
            out = {'results': hvd.run(fail_on, args=(1,), num_proc=np_)}
        else:
            out = {'results': hvd.run(exit_hard_on, args=(np_ - 1, 9), num_proc=np_)}
    except hvd.runner.RunError as e:
        out = {'error': str(e), 'rank': e.rank, 'exit_code': e.exit_code,
               'exception': type(e.exception).__name__ if e.exception is not None else None,
               'is_runtime_error': isinstance(e, RuntimeError)}
    print('JSON ' + json.dumps(out))
`

type runOutcome struct {
	Results        [][]any `json:"results"`
	Error          string  `json:"error"`
	Rank           *int    `json:"rank"`
	ExitCode       int     `json:"exit_code"`
	Exception      *string `json:"exception"`
	IsRuntimeError bool    `json:"is_runtime_error"`
}

func hvdRun(t *testing.T, pkg, mode, np string) runOutcome {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "driver.py")
	if err := os.WriteFile(script, []byte(runDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs")
	if err := os.Mkdir(runs, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, script, mode, np)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1",
		"HVD_HVDRUN="+bin("hvdrun"), "HVD_RUN_DIR="+runs)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("hvd.run (%s, np %s) did not finish within 3 minutes:\n%s", mode, np, tail(string(out), 60))
	}
	if err != nil {
		t.Fatalf("driver: %v\n%s", err, tail(string(out), 60))
	}
	js, ok := "", false
	for _, line := range strings.Split(string(out), "\n") {
		if rest, found := strings.CutPrefix(line, "JSON "); found {
			js, ok = rest, true
		}
	}
	if !ok {
		t.Fatalf("driver printed no result:\n%s", tail(string(out), 60))
	}
	var o runOutcome
	if err := json.Unmarshal([]byte(strings.TrimSpace(js)), &o); err != nil {
		t.Fatalf("%v in %q", err, js)
	}
	if left, _ := os.ReadDir(runs); len(left) != 0 {
		t.Errorf("hvd.run left %d entries in its run directory", len(left))
	}
	t.Logf("driver output:\n%s", tail(string(out), 30))
	return o
}

func TestPythonRun(t *testing.T) {
	pkg := numpyPackage(t)
	for _, np := range []int{2, 3} {
		t.Run("results/np"+strconv.Itoa(np), func(t *testing.T) {
			o := hvdRun(t, pkg, "ok", strconv.Itoa(np))
			if o.Error != "" {
				t.Fatalf("hvd.run failed: %s", o.Error)
			}
			sum := float64(np * (np + 1) / 2)
			var want [][]any
			for r := 0; r < np; r++ {
				want = append(want, []any{float64(r), float64(np), "tag", float64(3), sum})
			}
			if !reflect.DeepEqual(o.Results, want) {
				t.Errorf("results\n got %v\nwant %v (rank, size, arg, kwarg, allreduce sum) in rank order", o.Results, want)
			}
		})
	}
	t.Run("exception/np3", func(t *testing.T) {
		o := hvdRun(t, pkg, "raise", "3")
		if o.Rank == nil || *o.Rank != 1 || o.Exception == nil || *o.Exception != "KeyError" || !o.IsRuntimeError ||
			!strings.Contains(o.Error, "rank 1") || !strings.Contains(o.Error, "rank 1 cannot find its shard") ||
			!strings.Contains(o.Error, "in fail_on") {
			t.Errorf("want a RunError for rank 1's KeyError with its message and traceback, got %+v", o)
		}
	})
	t.Run("hard-exit/np2", func(t *testing.T) {
		o := hvdRun(t, pkg, "exit", "2")
		if o.Rank == nil || *o.Rank != 1 || o.ExitCode != 9 || o.Exception != nil ||
			!strings.Contains(o.Error, "rank 1") || !strings.Contains(o.Error, "exited with status 9") {
			t.Errorf("want a RunError naming rank 1 and status 9, got %+v", o)
		}
	})
}

// python/tests/test_run.py, run by the driver process itself (not under
// hvdrun), against the hvdrun built for this test.
func TestPythonRunSuite(t *testing.T) {
	pkg := numpyPackage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{}, pytestArgs...), "../python/tests/test_run.py")
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), pyEnv(pkg, "HVD_TEST_NO_INIT=1", "HVD_HVDRUN="+bin("hvdrun"))...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("test_run.py did not finish within 5 minutes:\n%s", tail(string(out), 60))
	}
	if err != nil {
		t.Fatalf("test_run.py: %v\n%s", err, tail(string(out), 80))
	}
	s := string(out)
	if !strings.Contains(s, " passed") {
		t.Fatalf("no pytest summary:\n%s", tail(s, 40))
	}
	for _, bad := range []string{" failed", " error", " skipped"} {
		if strings.Contains(s, bad) {
			t.Fatalf("pytest reported %q:\n%s", bad, tail(s, 40))
		}
	}
	t.Log(tail(s, 1))
}
