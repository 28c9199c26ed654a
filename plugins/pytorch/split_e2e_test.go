package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// TestMain removes the libhvd.so and hvdrun that plugintest.Runtime built.
func TestMain(m *testing.M) {
	code := m.Run()
	plugintest.CleanupRuntime()
	os.Exit(code)
}

// The whole path a user takes, with the real plugin code: a GPT written as
// a module whose forward runs a ModuleList of blocks (token ids in, through
// an embedding module), the user's data (token ids) and cross-entropy named
// in hvd.yaml's train section, inspected in the real interpreter and
// generated into split/ next to hvd.yaml; the job runs under hvdrun -np 4
// (2 stages × 2 replicas, 1F1B) from another directory for 20 steps in
// float64 and equals its single-process --reference: every parameter and
// every loss to 1e-10 relative.
func TestSplitGPTFactoryTrainsLikeReference(t *testing.T) {
	needTorch(t)
	lib, hvdrun := plugintest.Runtime(t)
	project := factoryDir(t, map[string]string{"tinygpt.py": tinyGPTPy(t), "tokens.py": simFixture(t, "tokens.py")})
	y := []byte(`version: 1
project: tinygpt
framework: pytorch
generate: [split]
model:
  factory: tinygpt:build
  input_shape: [16]
  input_dtype: int64
parallel: {stages: 2, data_parallel: 2, micro_batches: 2, schedule: 1f1b}
train:
  data: tokens:batches
  loss: tokens:cross_entropy
`)
	req := splitRequest(y, project)
	req.Options[plugin.OptionImportRoot] = ".." // hvdgen's default: split/ next to hvd.yaml
	set, err := adapter{}.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(project, "split")
	plugintest.WriteTree(t, set, job)
	pkg, err := adapter{}.Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	pydir := t.TempDir()
	plugintest.WriteTree(t, pkg, pydir)
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pydir, "hvd", "libhvd.so"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Run from elsewhere: train.py finds the model, the data and the loss
	// through the import root, not the working directory.
	elsewhere, dumps := t.TempDir(), t.TempDir()
	env := append(os.Environ(), "PYTHONPATH="+pydir, "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	runIn := func(timeout time.Duration, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = elsewhere, env, 10*time.Second
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil || err != nil {
			t.Fatalf("%s %v: %v (%v)\n%s", filepath.Base(name), args, err, ctx.Err(), tail(string(out), 40))
		}
		return string(out)
	}
	start := time.Now()
	out := runIn(5*time.Minute, hvdrun, "-np", "4", plugintest.Python, filepath.Join(job, "train.py"),
		"--steps", "20", "--dtype", "float64", "--dump", filepath.Join(dumps, "run.npz"))
	pipelined := time.Since(start)
	if !strings.Contains(out, "2 stages x 2 replicas") || !strings.Contains(out, "schedule 1f1b") || !strings.Contains(out, "step 19 loss") {
		t.Fatalf("the job did not report its layout and 20 steps:\n%s", tail(out, 30))
	}
	runIn(2*time.Minute, plugintest.Python, filepath.Join(job, "train.py"), "--reference", "--steps", "20", "--dtype", "float64",
		"--dump", filepath.Join(dumps, "ref.npz"))
	compare, _ := filepath.Abs("../../codegen/split/testdata/sim/compare.py")
	cmp := runIn(time.Minute, plugintest.Python, compare, filepath.Join(dumps, "run.npz"), filepath.Join(dumps, "ref.npz"), "--rtol", "1e-10")
	var res struct {
		OK          bool    `json:"ok"`
		Params      int     `json:"params"`
		Steps       int     `json:"steps"`
		MaxRelParam float64 `json:"max_rel_param"`
		MaxRelLoss  float64 `json:"max_rel_loss"`
		FirstLoss   float64 `json:"first_loss"`
		LastLoss    float64 `json:"last_loss"`
	}
	if err := json.Unmarshal([]byte(tail(cmp, 1)), &res); err != nil || !res.OK {
		t.Fatalf("the pipelined run does not match the reference to 1e-10: %v\n%s", err, cmp)
	}
	// 53 parameters: the two embeddings, 4 blocks of 12, ln_f's 2, the head.
	if res.Params != 53 || res.Steps != 20 {
		t.Fatalf("compared %d parameters over %d steps, want 53 and 20:\n%s", res.Params, res.Steps, cmp)
	}
	// The loss is the user's cross-entropy over 64 tokens (about ln 64 =
	// 4.16 at the start), falling; the generated MSE would start below 1.
	if !(res.FirstLoss > 3.5 && res.FirstLoss < 4.8) || !(res.LastLoss < res.FirstLoss) {
		t.Fatalf("losses %.4f -> %.4f: not a falling cross-entropy over 64 tokens", res.FirstLoss, res.LastLoss)
	}
	losses := regexp.MustCompile(`step (\d+) loss`).FindAllStringSubmatch(out, -1)
	if n, _ := strconv.Atoi(losses[len(losses)-1][1]); n != 19 {
		t.Fatalf("last step reported: %v", losses[len(losses)-1])
	}
	t.Logf("hvdrun -np 4, 20 steps in %.1f s: loss %.4f -> %.4f; max relative error: parameters %.2g, losses %.2g",
		pipelined.Seconds(), res.FirstLoss, res.LastLoss, res.MaxRelParam, res.MaxRelLoss)
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
