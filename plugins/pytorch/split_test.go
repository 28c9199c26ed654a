package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
	"github.com/hvdorg/hvd/plugins/internal/splitgen"
	"github.com/hvdorg/hvd/sdk/plugin"
)

// needTorch skips unless the system interpreter imports torch (Debian's
// python3-torch; .ci/run installs it).
func needTorch(t *testing.T) {
	t.Helper()
	torchOnce.Do(func() {
		out, err := exec.Command(plugintest.Python, "-c", "import torch").CombinedOutput()
		if err != nil {
			torchMissing = err.Error() + " " + strings.TrimSpace(string(out))
		}
	})
	if torchMissing != "" {
		t.Skipf("SKIPPED, NOT RUN: %s cannot import torch (apt-get install python3-torch): %s", plugintest.Python, torchMissing)
	}
}

var (
	torchOnce    sync.Once
	torchMissing string
)

// splitSpec is hvd.yaml for a pytorch split project with the given model
// section (indented under "model:").
func splitSpec(model string, stages, dp int) []byte {
	return []byte("version: 1\nproject: demo\nframework: pytorch\ngenerate: [split]\nmodel:\n" + model +
		"parallel:\n  stages: " + strconv.Itoa(stages) + "\n  data_parallel: " + strconv.Itoa(dp) + "\n  micro_batches: 2\n  schedule: 1f1b\n")
}

func splitRequest(specYAML []byte, dir string) plugin.GenerateRequest {
	return plugin.GenerateRequest{Kind: plugin.KindSplit, Spec: specYAML, Options: map[string]string{
		plugin.OptionSpecFile: "hvd.yaml",
		plugin.OptionSpecDir:  dir,
		plugin.OptionPython:   plugintest.Python,
	}}
}

// factoryDir writes nets.py (and any extra files) into a temporary
// directory: the user's project.
func factoryDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, src := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const netsPy = `import torch.nn as nn

def mlp():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))

def conv():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))

class Chain(nn.Module):
    """Not a Sequential, but its forward runs its children in order: accepted."""
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Tanh()
        self.c = nn.Linear(8, 2)
    def forward(self, x):
        return self.c(self.b(self.a(x)))

def chain():
    return Chain()

class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
    def forward(self, x):
        return self.b(self.a(x)) + x

def residual():
    return Residual()

def a_list():
    return [nn.Linear(2, 2)]

def mismatch():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(64, 4))

def broken():
    raise ValueError("no config file")
`

func TestSplitDeclared(t *testing.T) {
	s := spec.Default(spec.PyTorch)
	s.Generate = []string{spec.GenSplit}
	y, err := spec.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	set, err := adapter{}.Generate(context.Background(), splitRequest(y, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Files) == 0 || set.Validate() != nil {
		t.Fatalf("files %v, %v", set.Paths(), set.Validate())
	}
	if !strings.Contains(set.Summary, "stage") || !strings.Contains(set.Summary, "rank") {
		t.Fatalf("summary lacks the partition or topology table:\n%s", set.Summary)
	}
	d, _ := adapter{}.Describe(context.Background())
	if !reflectContains(d.GenerateKinds, plugin.KindSplit) {
		t.Fatalf("Describe does not list split: %v", d.GenerateKinds)
	}
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}

func reflectContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A factory model: imported and measured in the real interpreter, then
// split.
func TestSplitFactory(t *testing.T) {
	needTorch(t)
	dir := factoryDir(t, map[string]string{"nets.py": netsPy})
	y := splitSpec("  factory: nets:mlp\n", 2, 2)
	s, err := spec.Parse("hvd.yaml", y)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := inspectFactory(context.Background(), &splitgen.Request{Spec: s, Python: plugintest.Python, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var params []int64
	for i, l := range m.Layers {
		types = append(types, l.Type)
		params = append(params, l.Params)
		if l.Index != i || !(l.Cost > 0) {
			t.Errorf("layer %d: %+v", i, l)
		}
	}
	if want := []string{"Linear", "ReLU", "Linear", "ReLU", "Linear"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("types %v, want %v", types, want)
	}
	if want := []int64{16*64 + 64, 0, 64*64 + 64, 0, 64*4 + 4}; !reflect.DeepEqual(params, want) {
		t.Fatalf("params %v, want %v", params, want)
	}
	if !reflect.DeepEqual(m.InShape, []int{16}) || !reflect.DeepEqual(m.Layers[0].InShape, []int{16}) ||
		!reflect.DeepEqual(m.Layers[4].OutShape, []int{4}) || m.Factory != "nets:mlp" || m.DType != "float32" {
		t.Fatalf("model %+v", m)
	}
	if _, err := os.Stat(filepath.Join(dir, "__pycache__")); err == nil {
		t.Error("the inspection wrote __pycache__ into the user's directory")
	}

	set, err := adapter{}.Generate(context.Background(), splitRequest(y, dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Files) == 0 || !strings.Contains(set.Summary, "Linear") {
		t.Fatalf("files %v, summary:\n%s", set.Paths(), set.Summary)
	}

	// input_shape given; a non-Sequential module whose forward is its
	// children in order.
	for _, c := range []struct {
		model  string
		layers int
		in     []int
	}{
		{"  factory: nets:conv\n  input_shape: [3, 8, 8]\n", 4, []int{3, 8, 8}},
		{"  factory: nets:chain\n", 3, []int{8}},
	} {
		s, err := spec.Parse("hvd.yaml", splitSpec(c.model, 2, 1))
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := inspectFactory(context.Background(), &splitgen.Request{Spec: s, Python: plugintest.Python, Dir: dir})
		if err != nil {
			t.Fatalf("%s: %v", c.model, err)
		}
		if len(m.Layers) != c.layers || !reflect.DeepEqual(m.InShape, c.in) {
			t.Fatalf("%s: %+v", c.model, m)
		}
	}
}

// What goes wrong in the user's code is a positioned spec error naming the
// factory and, where there is one, the layer.
func TestInspectErrors(t *testing.T) {
	needTorch(t)
	dir := factoryDir(t, map[string]string{
		"nets.py":     netsPy,
		"needsdep.py": "import torch\nimport no_such_dependency\n",
		"syntax.py":   "def f(:\n",
	})
	for _, c := range []struct {
		name, model string
		want        []string
	}{
		{"module missing", "  factory: nosuchmodule:f\n",
			[]string{"hvd.yaml:6:12: model.factory: nosuchmodule:f: cannot import module nosuchmodule: ModuleNotFoundError", "looked in " + dir}},
		{"import error inside", "  factory: needsdep:f\n",
			[]string{"cannot import module needsdep: ModuleNotFoundError: No module named 'no_such_dependency' (at needsdep.py:2)"}},
		{"syntax error", "  factory: syntax:f\n", []string{"cannot import module syntax: SyntaxError"}},
		{"function missing", "  factory: nets:nosuch\n",
			[]string{"nets:nosuch: module nets (" + filepath.Join(dir, "nets.py") + ") has no function nosuch; it defines: a_list, broken, chain, conv, mismatch, mlp, residual"}},
		{"function raises", "  factory: nets:broken\n", []string{"calling broken() raised ValueError: no config file (at nets.py:"}},
		{"not a module", "  factory: nets:a_list\n", []string{"a_list() returned list, not a torch.nn.Module", "nn.Sequential"}},
		{"not sequential", "  factory: nets:residual\n",
			[]string{"residual() returned a Residual, not an nn.Sequential, and its forward is not its 2 children run in order"}},
		{"shape mismatch", "  factory: nets:mismatch\n",
			[]string{"nets:mismatch: layer 2 (Linear) cannot take the output of layer 1 (ReLU), per-sample shape [32]: RuntimeError"}},
		{"input_shape missing", "  factory: nets:conv\n",
			[]string{"model.input_shape is needed: layer 0 (Conv2d) does not tell the shape of its input"}},
		{"input_shape wrong", "  factory: nets:conv\n  input_shape: [1, 8, 8]\n",
			[]string{"hvd.yaml:7:16: model.input_shape: nets:conv: layer 0 (Conv2d) cannot take an input of per-sample shape [1, 8, 8] (model.input_shape)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := adapter{}.Generate(context.Background(), splitRequest(splitSpec(c.model, 1, 1), dir))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, plugin.ErrInvalidRequest) || !errors.Is(err, spec.ErrInvalid) {
				t.Errorf("not an input error (ErrInvalidRequest, spec.ErrInvalid): %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// An interpreter without torch is ErrNotImportable (hvdgen: exit 4); one
// that cannot run is an internal error.
func TestInspectInterpreterProblems(t *testing.T) {
	if _, err := os.Stat(plugintest.Python); err != nil {
		t.Skipf("SKIPPED: %s not present", plugintest.Python)
	}
	dir := factoryDir(t, map[string]string{"nets.py": netsPy})
	// python -S leaves out site-packages, where torch lives.
	noTorch := filepath.Join(t.TempDir(), "python-without-site")
	os.WriteFile(noTorch, []byte("#!/bin/sh\nexec "+plugintest.Python+" -S \"$@\"\n"), 0o755)
	req := splitRequest(splitSpec("  factory: nets:mlp\n", 1, 1), dir)
	req.Options[plugin.OptionPython] = noTorch
	_, err := adapter{}.Generate(context.Background(), req)
	if !errors.Is(err, plugin.ErrNotImportable) || !strings.Contains(err.Error(), "needs torch in "+noTorch) {
		t.Fatalf("without torch: %v", err)
	}
	req.Options[plugin.OptionPython] = "/bin/false"
	_, err = adapter{}.Generate(context.Background(), req)
	if !errors.Is(err, errInspect) || errors.Is(err, plugin.ErrInvalidRequest) {
		t.Fatalf("an interpreter that fails: %v", err)
	}
}

// Requests the plugin must refuse before running anything.
func TestSplitBadRequests(t *testing.T) {
	ctx := context.Background()
	_, err := adapter{}.Generate(ctx, plugin.GenerateRequest{Kind: plugin.KindSplit})
	if !errors.Is(err, plugin.ErrInvalidRequest) {
		t.Errorf("no spec: %v", err)
	}
	tf := []byte(strings.Replace(string(splitSpec("  layers: [{type: Linear, args: {in_features: 2, out_features: 2}}]\n", 1, 1)), "framework: pytorch", "framework: tensorflow", 1))
	_, err = adapter{}.Generate(ctx, splitRequest(tf, t.TempDir()))
	if !errors.Is(err, plugin.ErrInvalidRequest) || !strings.Contains(err.Error(), "hvd.yaml:3:12: framework: the spec is for tensorflow, but this is the pytorch plugin") {
		t.Errorf("other framework: %v", err)
	}
	_, err = adapter{}.Generate(ctx, splitRequest([]byte("version: 1\nproject: p\nframework: pytorch\nparallel: {stages: 0}\n"), t.TempDir()))
	if !errors.Is(err, plugin.ErrInvalidRequest) || !strings.Contains(err.Error(), "hvd.yaml:4:") {
		t.Errorf("bad spec: %v", err)
	}
}
