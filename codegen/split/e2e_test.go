package split

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/codegen/spec"
)

// The end-to-end proof (issue 7): the generated PyTorch job, run by
// hvdrun on real processes over hvd's own point-to-point and collectives,
// trains the default 5-layer MLP for 20 steps and matches a single-process
// reference run of the same model, seed and data to 1e-5 relative error in
// float64 (every parameter and every step's loss), for 2 stages × 2
// replicas (np 4) and 3 stages × 1 (np 3), with both schedules. hvdrun and
// libhvd.so are built fresh from this checkout, as e2e/ does.

var (
	e2eOnce             sync.Once
	e2eBin, e2ePy, e2eE string // hvdrun's directory, the PYTHONPATH entry, a build error
)

// TestMain removes the binaries e2eBuild made.
func TestMain(m *testing.M) {
	code := m.Run()
	if e2eBin != "" {
		os.RemoveAll(e2eBin)
	}
	os.Exit(code)
}

func e2eBuild(t *testing.T) (hvdrun, pythonpath string) {
	t.Helper()
	e2eOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hvd-split-e2e-")
		if err != nil {
			e2eE = err.Error()
			return
		}
		root, _ := filepath.Abs("../..")
		py := filepath.Join(dir, "python")
		if err := os.CopyFS(filepath.Join(py, "hvd"), os.DirFS(filepath.Join(root, "python", "hvd"))); err != nil {
			e2eE = err.Error()
			return
		}
		for _, args := range [][]string{
			{"build", "-o", dir + "/", "./cmd/hvdrun"},
			{"build", "-buildmode=c-shared", "-o", filepath.Join(py, "hvd", "libhvd.so"), "./cmd/libhvd"},
		} {
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				e2eE = fmt.Sprintf("go %v: %v\n%s", args, err, out)
				return
			}
		}
		e2eBin, e2ePy = dir, py
	})
	if e2eE != "" {
		t.Fatal(e2eE)
	}
	return filepath.Join(e2eBin, "hvdrun"), e2ePy
}

// run runs a command in dir with a deadline and returns its combined
// output and exit code; on timeout the process group is killed.
func run(t *testing.T, dir string, timeout time.Duration, env []string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %v:\n%s", name, args, timeout, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out.String(), code
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the end-to-end runs start 14 Python processes")
	}
	havePython(t, "torch, numpy")
	hvdrun, pythonpath := e2eBuild(t)
	compare, _ := filepath.Abs(filepath.Join("testdata", "sim", "compare.py"))
	env := []string{"PYTHONPATH=" + pythonpath, "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1"}
	// Every layout × schedule on the default data plane (shared memory),
	// and one layout on TCP (other p2p code: sockets, no eager copies).
	type e2eCase struct {
		p, d    int
		sched   spec.Schedule
		backend string
	}
	var cases2 []e2eCase
	for _, c := range []struct{ p, d int }{{2, 2}, {3, 1}} {
		for _, sched := range spec.Schedules {
			cases2 = append(cases2, e2eCase{c.p, c.d, sched, "auto"})
		}
	}
	cases2 = append(cases2, e2eCase{2, 2, spec.OneFOneB, "tcp"})
	for _, c := range cases2 {
		sched := c.sched
		{
			name := fmt.Sprintf("%dx%d-%s", c.p, c.d, sched)
			if c.backend != "auto" {
				name += "-" + c.backend
			}
			env := append(env[:len(env):len(env)], "HVD_BACKEND="+c.backend)
			t.Run(name, func(t *testing.T) {
				r := generate(t, genCase{name: "e2e", spec: func() *spec.Spec {
					return withParallel(defaultSpec(spec.PyTorch), c.p, c.d, 4, sched)
				}})
				dir := t.TempDir()
				writeFiles(t, dir, r)
				np := c.p * c.d
				out, code := run(t, dir, 4*time.Minute, env, hvdrun, "-np", fmt.Sprint(np), python, "train.py",
					"--steps", "20", "--dtype", "float64", "--dump", "run.npz")
				if code != 0 {
					t.Fatalf("hvdrun -np %d train.py: exit %d\n%s", np, code, lastLines(out, 60))
				}
				if !strings.Contains(out, "schedule "+string(sched)) || !strings.Contains(out, "step 19 loss") {
					t.Fatalf("the job did not report its schedule and 20 steps:\n%s", lastLines(out, 30))
				}
				if out, code := run(t, dir, 2*time.Minute, env, python, "train.py", "--reference",
					"--steps", "20", "--dtype", "float64", "--dump", "ref.npz"); code != 0 {
					t.Fatalf("train.py --reference: exit %d\n%s", code, lastLines(out, 30))
				}
				cmp, code := run(t, dir, time.Minute, env, python, compare, "run.npz", "ref.npz", "--rtol", "1e-5")
				var res simResult
				if err := json.Unmarshal([]byte(lastLines(cmp, 1)), &res); err != nil || code != 0 || !res.OK {
					t.Fatalf("the pipelined run does not match the reference (exit %d):\n%s", code, cmp)
				}
				if res.Params != 6 || res.Steps != 20 {
					t.Errorf("compared %d parameters over %d steps, want 6 and 20", res.Params, res.Steps)
				}
				t.Logf("20 steps, loss %.4f -> %.4f; max relative error: parameters %.2g, losses %.2g",
					res.FirstLoss, res.LastLoss, res.MaxRelParam, res.MaxRelLoss)
			})
		}
	}
	// Started with the wrong number of processes, the job stops at once
	// with the command that would start it right (every rank checks; the
	// first to exit makes hvdrun stop the others, so some may not get to
	// print it), and nothing trains.
	t.Run("wrong-np", func(t *testing.T) {
		r := generate(t, cases[0]) // 2 stages × 2 replicas
		dir := t.TempDir()
		writeFiles(t, dir, r)
		out, code := run(t, dir, 2*time.Minute, env, hvdrun, "-np", "3", python, "train.py", "--steps", "1")
		want := "this job was generated for 2 stages x 2 replicas = 4 ranks, but the launcher started 3: run hvdrun -np 4 python train.py"
		if code == 0 || strings.Count(out, want) < 1 || strings.Contains(out, "step 0 loss") {
			t.Fatalf("exit %d, want the message and no training:\n%s", code, lastLines(out, 30))
		}
	})
}
