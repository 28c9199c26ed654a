package split

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hvdorg/hvd/codegen/spec"
)

// The transformer split's numerics (issue 25): a small GPT (4 blocks,
// hidden 64, 4 heads, vocabulary 256, sequence 32) trained 20 steps in
// float64 by the generated job in every T×P×D layout of -np 4 and of -np 8,
// with and without interleaving, ZeRO stages 1 and 2, recomputation and
// both schedules, equals the single-process reference to 1e-10 (every
// parameter, relative to the tensor's largest value, and every step's
// loss); and a checkpoint saved at 2×2×2 after 10 steps and loaded at
// 1×2×4 continues exactly as the reference does.

const gptYAML = `version: 1
project: gpt
framework: pytorch
generate: [split]
model:
  gpt: {vocab: 256, seq_len: 32, hidden: 64, heads: 4, blocks: 4, tied: %v}
parallel: {tensor: %d, stages: %d, data_parallel: %d, micro_batches: %d, schedule: %s, virtual_stages: %d, zero: %d, recompute: %v}
`

type gptCase struct {
	t, p, d, m, v, zero int
	sched               spec.Schedule
	recompute, untied   bool
}

func (c gptCase) name() string {
	n := fmt.Sprintf("%dx%dx%d-m%d-%s", c.t, c.p, c.d, c.m, c.sched)
	if c.v > 1 {
		n += fmt.Sprintf("-v%d", c.v)
	}
	if c.zero > 0 {
		n += fmt.Sprintf("-zero%d", c.zero)
	}
	if c.recompute {
		n += "-recompute"
	}
	if c.untied {
		n += "-untied"
	}
	return n
}

func generateGPT(t *testing.T, c gptCase) *Result {
	t.Helper()
	v := max(c.v, 1)
	src := fmt.Sprintf(gptYAML, !c.untied, c.t, c.p, c.d, c.m, c.sched, v, c.zero, c.recompute)
	s, err := spec.Parse("hvd.yaml", []byte(src))
	if err != nil {
		t.Fatalf("spec:\n%s\n%v", src, err)
	}
	r, err := GenerateGPT(s, ".")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// gptReference trains the reference once per variant (it does not depend
// on the layout) and returns the directory holding ref.npz / ref.json.
var (
	gptRefMu   sync.Mutex
	gptRefDirs = map[bool]string{}
)

func gptReference(t *testing.T, env []string, untied bool) string {
	gptRefMu.Lock()
	defer gptRefMu.Unlock()
	if d, ok := gptRefDirs[untied]; ok {
		return d
	}
	dir, err := os.MkdirTemp("", "hvd-gpt-ref-")
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, generateGPT(t, gptCase{t: 1, p: 1, d: 1, m: 1, sched: spec.OneFOneB, untied: untied}))
	out, code := run(t, dir, 3*time.Minute, env, python, "train.py", "--reference", "--steps", "20", "--batch-size", "8",
		"--dtype", "float64", "--dump", "ref.npz")
	if code != 0 {
		t.Fatalf("train.py --reference: exit %d\n%s", code, lastLines(out, 30))
	}
	gptRefDirs[untied] = dir
	return dir
}

func TestGPTEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the transformer runs start 60 Python processes")
	}
	havePython(t, "torch, numpy")
	hvdrun, pythonpath := e2eBuild(t)
	env := []string{"PYTHONPATH=" + pythonpath, "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1"}
	t.Cleanup(func() {
		for _, d := range gptRefDirs {
			os.RemoveAll(d)
		}
	})
	cases := []gptCase{
		// -np 4: every T×P×D with two factors of 2, and the pure ones.
		{t: 2, p: 2, d: 1, m: 2, sched: spec.OneFOneB},
		{t: 2, p: 1, d: 2, m: 2, sched: spec.OneFOneB, zero: 2},
		{t: 1, p: 2, d: 2, m: 2, sched: spec.OneFOneB, v: 2, zero: 1},
		{t: 4, p: 1, d: 1, m: 2, sched: spec.GPipe},
		{t: 1, p: 4, d: 1, m: 4, sched: spec.OneFOneB, untied: true},
		{t: 1, p: 4, d: 1, m: 4, sched: spec.OneFOneB},
		// -np 8: 2×2×2, interleaved with ZeRO-2 and recomputation, and plain.
		{t: 2, p: 2, d: 2, m: 2, sched: spec.OneFOneB, v: 2, zero: 2, recompute: true},
		{t: 2, p: 2, d: 2, m: 4, sched: spec.GPipe},
	}
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			ref := gptReference(t, env, c.untied)
			dir := t.TempDir()
			writeFiles(t, dir, generateGPT(t, c))
			np := c.t * c.p * c.d
			out, code := run(t, dir, 5*time.Minute, env, hvdrun, "-np", fmt.Sprint(np), python, "train.py",
				"--steps", "20", "--batch-size", "8", "--dtype", "float64", "--dump", "run.npz")
			if code != 0 {
				t.Fatalf("hvdrun -np %d train.py: exit %d\n%s", np, code, lastLines(out, 60))
			}
			if !strings.Contains(out, "step 19 loss") {
				t.Fatalf("no 20 steps reported:\n%s", lastLines(out, 30))
			}
			compareGPT(t, dir, env, "run.npz", filepath.Join(ref, "ref.npz"))
		})
	}
	// A checkpoint written at 2×2×2 (ZeRO-1 shards, tensor-parallel
	// slices) after 10 steps, loaded at 1×2×4 (no tensor parallelism, four
	// replicas) for the next 10: the same parameters and losses as the
	// reference's 20 steps.
	t.Run("checkpoint-2x2x2-to-1x2x4", func(t *testing.T) {
		ref := gptReference(t, env, false)
		dir := t.TempDir()
		first, second := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		writeFiles(t, first, generateGPT(t, gptCase{t: 2, p: 2, d: 2, m: 2, sched: spec.OneFOneB, zero: 1}))
		writeFiles(t, second, generateGPT(t, gptCase{t: 1, p: 2, d: 4, m: 2, sched: spec.OneFOneB, zero: 2}))
		ckpt := filepath.Join(dir, "ckpt")
		out, code := run(t, first, 5*time.Minute, env, hvdrun, "-np", "8", python, "train.py", "--steps", "10",
			"--batch-size", "8", "--dtype", "float64", "--save", ckpt, "--dump", "run.npz")
		if code != 0 {
			t.Fatalf("2x2x2 with --save: exit %d\n%s", code, lastLines(out, 60))
		}
		out, code = run(t, second, 5*time.Minute, env, hvdrun, "-np", "8", python, "train.py", "--steps", "10",
			"--batch-size", "8", "--dtype", "float64", "--load", ckpt, "--dump", "run.npz")
		if code != 0 {
			t.Fatalf("1x2x4 with --load: exit %d\n%s", code, lastLines(out, 60))
		}
		if !strings.Contains(out, "step 10 loss") || !strings.Contains(out, "step 19 loss") {
			t.Fatalf("the loaded job did not continue at step 10:\n%s", lastLines(out, 30))
		}
		// The two runs' losses together are the reference's 20.
		var a map[string]any
		readJSON(t, filepath.Join(first, "run.json"), &a)
		prependLosses(t, filepath.Join(second, "run.json"), a["losses"].([]any))
		compareGPT(t, second, env, "run.npz", filepath.Join(ref, "ref.npz"))
	})
	// A rank dies (kill -9) after the checkpoint of step 10 of a 2x1x2 job
	// that checkpoints every 10 steps: hvdrun stops the job; it restarts
	// from that checkpoint at another layout (1x2x2) and ends where the
	// reference's 20 steps end.
	t.Run("rank-dies-restart-at-new-layout", func(t *testing.T) {
		ref := gptReference(t, env, false)
		dir := t.TempDir()
		first, second := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		writeFiles(t, first, generateGPT(t, gptCase{t: 2, p: 1, d: 2, m: 2, sched: spec.OneFOneB, zero: 2}))
		writeFiles(t, second, generateGPT(t, gptCase{t: 1, p: 2, d: 2, m: 2, sched: spec.OneFOneB}))
		ckpt := filepath.Join(dir, "ckpt")
		out, code := runKilling(t, first, env, "checkpoint "+ckpt+": step 10", hvdrun, "-np", "4", python, "train.py",
			"--steps", "20", "--batch-size", "8", "--dtype", "float64", "--save", ckpt, "--save-every", "10")
		if code == 0 || strings.Contains(out, "step 19 loss") {
			t.Fatalf("the job survived the kill (exit %d):\n%s", code, lastLines(out, 30))
		}
		losses := map[int]float64{}
		for _, line := range strings.Split(out, "\n") {
			var step int
			var loss float64
			if i := strings.Index(line, "step "); i >= 0 {
				if n, _ := fmt.Sscanf(line[i:], "step %d loss %g", &step, &loss); n == 2 {
					losses[step] = loss
				}
			}
		}
		out, code = run(t, second, 5*time.Minute, env, hvdrun, "-np", "4", python, "train.py", "--steps", "10",
			"--batch-size", "8", "--dtype", "float64", "--load", ckpt, "--dump", "run.npz")
		if code != 0 || !strings.Contains(out, "step 10 loss") {
			t.Fatalf("restart at 1x2x2 from the step-10 checkpoint: exit %d\n%s", code, lastLines(out, 40))
		}
		// The killed run's losses (printed to 6 decimals) are the reference's;
		// the restarted run's (dumped) are compared exactly below, after the
		// reference's first 10.
		var r map[string]any
		readJSON(t, filepath.Join(ref, "ref.json"), &r)
		want := r["losses"].([]any)
		for s := 0; s < 10; s++ {
			l, ok := losses[s]
			if !ok {
				t.Fatalf("the killed run did not report step %d's loss:\n%s", s, lastLines(out, 30))
			}
			if w := want[s].(float64); math.Abs(l-w) > 1e-6*math.Abs(w) {
				t.Fatalf("step %d: loss %v before the kill, reference %v", s, l, w)
			}
		}
		prependLosses(t, filepath.Join(second, "run.json"), want[:10:10])
		compareGPT(t, second, env, "run.npz", filepath.Join(ref, "ref.npz"))
	})
	// Under --memory-limit (RLIMIT_AS above the start-up footprint) an
	// allocation the kernel refuses ends the run with a clear out-of-memory
	// message, not a traceback (bench/gpt_memory/run.sh uses it to show a
	// model one process cannot hold training split).
	t.Run("memory-limit", func(t *testing.T) {
		dir := t.TempDir()
		// 3.7 M parameters: AdamW needs ~60 MB for them, more than 30 MiB.
		s, err := spec.Parse("hvd.yaml", []byte("version: 1\nproject: m\nframework: pytorch\ngenerate: [split]\n"+
			"model:\n  gpt: {vocab: 8192, seq_len: 32, hidden: 256, heads: 4, blocks: 2}\nparallel: {stages: 1}\n"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := GenerateGPT(s, ".")
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, dir, r)
		out, code := run(t, dir, 2*time.Minute, env, python, "train.py", "--reference", "--steps", "2", "--memory-limit", "30")
		if code == 0 || !strings.Contains(out, "out of memory: this process needs more than the 30 MiB --memory-limit allows") ||
			strings.Contains(out, "Traceback") {
			t.Fatalf("exit %d, want the out-of-memory message:\n%s", code, lastLines(out, 20))
		}
	})
	// A wrong -np stops every rank with the command that starts the job.
	t.Run("wrong-np", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, generateGPT(t, gptCase{t: 2, p: 1, d: 1, m: 1, sched: spec.OneFOneB}))
		out, code := run(t, dir, 2*time.Minute, env, hvdrun, "-np", "3", python, "train.py", "--steps", "1")
		want := "this job was generated for 2 tensor x 1 stages x 1 replicas = 2 ranks, but the launcher started 3"
		if code == 0 || !strings.Contains(out, want) || strings.Contains(out, "step 0 loss") {
			t.Fatalf("exit %d, want %q and no training:\n%s", code, want, lastLines(out, 30))
		}
	})
}

// runKilling runs the command and, once its output contains marker, kills
// one of hvdrun's worker processes with SIGKILL; it returns the output and
// the exit code.
func runKilling(t *testing.T, dir string, env []string, marker, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(5 * time.Minute)
	killed := false
	for {
		select {
		case err := <-done:
			mu.Lock()
			defer mu.Unlock()
			if !killed {
				t.Fatalf("the job ended before %q appeared (%v):\n%s", marker, err, lastLines(out.String(), 30))
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			return out.String(), code
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no %q within 5 minutes", marker)
		case <-time.After(100 * time.Millisecond):
			mu.Lock()
			seen := strings.Contains(out.String(), marker)
			mu.Unlock()
			if seen && !killed {
				kids := childrenOf(cmd.Process.Pid)
				if len(kids) == 0 {
					t.Fatal("hvdrun has no worker processes to kill")
				}
				syscall.Kill(kids[len(kids)-1], syscall.SIGKILL)
				killed = true
			}
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	sort.Ints(kids)
	return kids
}

// prependLosses puts earlier steps' losses before those of a --dump's .json.
func prependLosses(t *testing.T, path string, earlier []any) {
	t.Helper()
	var m map[string]any
	readJSON(t, path, &m)
	m["losses"] = append(earlier, m["losses"].([]any)...)
	data, _ := json.Marshal(m)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func compareGPT(t *testing.T, dir string, env []string, got, want string) {
	t.Helper()
	out, code := run(t, dir, time.Minute, env, python, "compare.py", got, want, "--rtol", "1e-10")
	if code != 0 || !strings.Contains(out, "matches the single-process reference") {
		t.Fatalf("the split job differs from the reference (exit %d):\n%s", code, out)
	}
	if !strings.Contains(out, "68 parameters, 20 steps") && !strings.Contains(out, "69 parameters, 20 steps") {
		t.Fatalf("compared the wrong things:\n%s", out)
	}
	t.Log(strings.TrimSpace(lastLines(out, 2)))
}
