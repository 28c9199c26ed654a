package plugintest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
)

// SplitRunsLikeReference generates the split job for fw's default declared
// model at stages x replicas with the schedule, runs it under hvdrun with
// python (a framework venv) for 20 steps in float64, runs its --reference
// (the same model in one process) and checks every parameter and loss
// against it with codegen/split/testdata/sim/compare.py (rtol 1e-5), as
// codegen/split's PyTorch end-to-end test does.
func SplitRunsLikeReference(t *testing.T, a plugin.FrameworkAdapter, fw spec.Framework, python string,
	stages, replicas int, sched spec.Schedule) {
	t.Helper()
	s := spec.Default(fw)
	s.Project = "demo-" + string(fw)
	if fw == spec.TensorFlow {
		s.Model.InputShape = []int{16} // Keras's first Dense does not say its input size
	}
	s.Parallel = &spec.Parallel{Stages: stages, DataParallel: replicas, MicroBatches: 4, Schedule: sched, Tensor: 1, VirtualStages: 1}
	set, err := a.Generate(context.Background(), SplitRequest(t, s))
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := a.Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	lib, hvdrun := Runtime(t)
	pydir := t.TempDir()
	WriteTree(t, pkg, pydir)
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pydir, "hvd", "libhvd.so"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	WriteTree(t, set, dir)
	job := dir
	if _, err := os.Stat(filepath.Join(dir, "split", "train.py")); err == nil {
		job = filepath.Join(dir, "split")
	}
	env := append(os.Environ(), "PYTHONPATH="+pydir, "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1",
		"TF_CPP_MIN_LOG_LEVEL=2", "MXNET_CPU_WORKER_NTHREADS=1")
	runIn := func(timeout time.Duration, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = job, env, 10*time.Second
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil || err != nil {
			t.Fatalf("%s %v: %v (%v)\n%s", filepath.Base(name), args, err, ctx.Err(), lastLines(string(out), 50))
		}
		return string(out)
	}
	np := stages * replicas
	out := runIn(4*time.Minute, hvdrun, "-np", fmt.Sprint(np), python, "train.py", "--steps", "20", "--dtype", "float64",
		"--dump", "run.npz")
	if !strings.Contains(out, "step 19 loss") {
		t.Fatalf("the job did not report 20 steps:\n%s", lastLines(out, 30))
	}
	runIn(2*time.Minute, python, "train.py", "--reference", "--steps", "20", "--dtype", "float64", "--dump", "ref.npz")
	compare, _ := filepath.Abs("../../codegen/split/testdata/sim/compare.py")
	cmp := runIn(time.Minute, python, compare, "run.npz", "ref.npz", "--rtol", "1e-5")
	var res struct {
		OK     bool `json:"ok"`
		Params int  `json:"params"`
		Steps  int  `json:"steps"`
	}
	if err := json.Unmarshal([]byte(lastLines(cmp, 1)), &res); err != nil || !res.OK {
		t.Fatalf("the pipelined run does not match the reference: %v\n%s", err, cmp)
	}
	if res.Params == 0 || res.Steps != 20 {
		t.Fatalf("compared %d parameters over %d steps:\n%s", res.Params, res.Steps, cmp)
	}
	t.Logf("%s", lastLines(cmp, 1))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
