package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
	"github.com/hvdorg/hvd/plugins/internal/splitgen"
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

// tinyGPTPy is a GPT written the way people write one (a ModuleList of
// blocks, token ids in: codegen/split's simulation fixture, shared), and
// the ways to write one that hvdgen cannot cut.
func tinyGPTPy(t *testing.T) string {
	return simFixture(t, "tinygpt.py") + "\n\n" + tinyGPTUncuttable
}

// simFixture reads one of codegen/split's simulation fixtures
// (testdata/sim), which the plugin's tests share.
func simFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "codegen", "split", "testdata", "sim", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

const tinyGPTUncuttable = `class PosParam(GPT):
    """The position embedding as a bare nn.Parameter on the model."""
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(1, SEQ, HIDDEN))

    def forward(self, ids):
        x = self.embed.tok(ids) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class Skip(GPT):
    """A residual around two blocks, in the model's forward."""
    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.blocks[1](self.blocks[0](x))
        for b in self.blocks[2:]:
            x = b(x)
        return self.head(self.ln_f(x))


class Twice(GPT):
    """The first block run twice."""
    def forward(self, ids):
        x = self.embed(ids)
        x = self.blocks[0](x)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class Tied(GPT):
    def __init__(self):
        super().__init__()
        self.head.weight = self.embed.tok.weight


class Scaled(GPT):
    """Computation between two children: the final LayerNorm's output scaled."""
    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x) * 0.5)


def pos_param():
    return PosParam()


def skip():
    return Skip()


def twice():
    return Twice()


def tied():
    return Tied()


def scaled():
    return Scaled()


class Unused(GPT):
    """A child forward never runs."""
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)


def unused():
    return Unused()


def shared_block():
    """One Block object in two places of the ModuleList."""
    m = GPT()
    m.blocks[1] = m.blocks[0]
    return m


def sequential():
    """A GPT-like nn.Sequential starting with nn.Embedding: token ids without input_dtype."""
    return nn.Sequential(nn.Embedding(VOCAB, HIDDEN), Block(), nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, VOCAB))


def no_embedding():
    return nn.Sequential(nn.Linear(SEQ, HIDDEN), nn.Linear(HIDDEN, 4))


class Argmax(nn.Module):
    def forward(self, x):
        return x.argmax(-1)


def int_output():
    return nn.Sequential(nn.Linear(SEQ, HIDDEN), Argmax(), nn.Embedding(HIDDEN, 4))


class MaskBlock(Block):
    def forward(self, x, mask=None):
        return super().forward(x)


class Masked(GPT):
    """Blocks called with a mask as a second argument."""
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([MaskBlock() for _ in range(BLOCKS)])

    def forward(self, ids):
        x = self.embed(ids)
        mask = torch.ones(ids.shape[1], ids.shape[1]).tril()
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln_f(x))


def masked():
    return Masked()
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

// A GPT whose forward runs a ModuleList of blocks (not an nn.Sequential)
// is inspected in the real interpreter and cut at block boundaries: its
// layers are the children in forward's order with the ModuleList expanded,
// named by path; its input is int64 token ids (model.input_dtype). The
// generated model.py rebuilds exactly that chain: its reference gives the
// factory model's own output.
func TestSplitFactoryModuleList(t *testing.T) {
	needTorch(t)
	dir := factoryDir(t, map[string]string{"tinygpt.py": tinyGPTPy(t)})
	y := splitSpec("  factory: tinygpt:build\n  input_shape: [16]\n  input_dtype: int64\n", 2, 2)
	s, err := spec.Parse("hvd.yaml", y)
	if err != nil {
		t.Fatal(err)
	}
	m, note, err := inspectFactory(context.Background(), &splitgen.Request{Spec: s, Python: plugintest.Python, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var names, types []string
	var params []int64
	for _, l := range m.Layers {
		names, types, params = append(names, l.Name), append(types, l.Type), append(params, l.Params)
	}
	block := int64(2*2*32 + (32*96 + 96) + (32*32 + 32) + (32*128 + 128) + (128*32 + 32))
	if want := []string{"embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "ln_f", "head"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	if want := []string{"Embed", "Block", "Block", "Block", "Block", "LayerNorm", "Linear"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("types %v, want %v", types, want)
	}
	if want := []int64{64*32 + 16*32, block, block, block, block, 64, 32 * 64}; !reflect.DeepEqual(params, want) {
		t.Fatalf("params %v, want %v", params, want)
	}
	if m.InputDType != "int64" || m.InputHigh != 64 || !reflect.DeepEqual(m.InShape, []int{16}) ||
		!reflect.DeepEqual(m.Layers[0].OutShape, []int{16, 32}) || !reflect.DeepEqual(m.Layers[6].OutShape, []int{16, 64}) {
		t.Fatalf("model %+v", m)
	}
	if !strings.Contains(note, "input [16] int64 ids below 64 per sample") {
		t.Errorf("note: %s", note)
	}

	req := splitRequest(y, dir)
	req.Options[plugin.OptionImportRoot] = ".."
	set, err := adapter{}.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "split")
	for _, f := range set.Files {
		os.MkdirAll(filepath.Join(out, filepath.Dir(f.Path)), 0o755)
		if err := os.WriteFile(filepath.Join(out, f.Path), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model := string(set.Files[slices.IndexFunc(set.Files, func(f plugin.File) bool { return f.Path == "model.py" })].Data)
	for _, want := range []string{`("blocks.3", "Block"),`, "INPUT_DTYPE = torch.int64", "INPUT_HIGH = 64"} {
		if !strings.Contains(model, want) {
			t.Errorf("model.py lacks %q", want)
		}
	}
	// The reference (the layers sliced out of the factory's model, chained)
	// and the two stages in a row compute what the factory's model does.
	check := `import torch
import model
ref = model.build_reference(42, torch.float64)  # puts the project directory on sys.path
import tinygpt
torch.manual_seed(42)
whole = tinygpt.build().double()
ids = torch.randint(64, (5, 16))
want = whole(ids)
s0, s1 = model.build_stage(0, 42, torch.float64), model.build_stage(1, 42, torch.float64)
assert len(list(ref.children())) == 7, ref
print("max", float((ref(ids) - want).abs().max()), float((s1(s0(ids)) - want).abs().max()))
`
	cmd := exec.Command(plugintest.Python, "-c", check)
	cmd.Dir = out // model.py imports tinygpt from ".." itself
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "max 0.0 0.0") {
		t.Fatalf("the generated model.py does not rebuild the factory's model exactly (want max 0.0 0.0): %v\n%s", err, got)
	}

	// A GPT-like nn.Sequential whose first layer is an nn.Embedding takes
	// token ids without model.input_dtype.
	s, err = spec.Parse("hvd.yaml", splitSpec("  factory: tinygpt:sequential\n  input_shape: [16]\n", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err = inspectFactory(context.Background(), &splitgen.Request{Spec: s, Python: plugintest.Python, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if m.InputDType != "int64" || m.InputHigh != 64 || len(m.Layers) != 4 || m.Layers[1].Name != "1" {
		t.Fatalf("sequential: %+v", m)
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
		"tinygpt.py":  tinyGPTPy(t),
	})
	const gpt = "  input_shape: [16]\n  input_dtype: int64\n"
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
		{"residual at the end", "  factory: nets:residual\n",
			[]string{"hvd.yaml:6:12: model.factory: nets:residual: Residual's forward adds the input of layer 0 (a: Linear) to the output of layer 1 (b: Linear), its last child: a residual connection around children"}},
		// A GPT (a ModuleList of blocks) that cannot be cut, each for its reason.
		{"parameter outside any child", "  factory: tinygpt:pos_param\n" + gpt,
			[]string{"tinygpt:pos_param: 'pos' is a parameter of PosParam itself (shape [1, 16, 32]), outside any child module, so no pipeline stage can own it", "nn.Embedding"}},
		{"residual around two blocks", "  factory: tinygpt:skip\n" + gpt,
			[]string{"Skip's forward adds the input of layer 1 (blocks.0: Block) to the output of layer 2 (blocks.1: Block) before layer 3 (blocks.2: Block) runs: a residual connection around children",
				"put the residual inside one child module"}},
		{"child run twice", "  factory: tinygpt:twice\n" + gpt,
			[]string{"Twice's forward runs layer 1 (blocks.0: Block) 2 times: the same child used twice cannot be cut into stages"}},
		{"one block in two places", "  factory: tinygpt:shared_block\n" + gpt,
			[]string{"'blocks.0' and 'blocks.1' are the same Block object (layers 1 and 2)"}},
		{"tied weights", "  factory: tinygpt:tied\n" + gpt,
			[]string{"'embed' and 'head' share one parameter ('embed.tok.weight' is 'head.weight', tied weights)", "model.gpt"}},
		{"computation between children", "  factory: tinygpt:scaled\n" + gpt,
			[]string{"Scaled's forward does not give layer 6 (head: Linear) the output of layer 5 (ln_f: LayerNorm), the child it ran before"}},
		{"child never run", "  factory: tinygpt:unused\n" + gpt,
			[]string{"Unused's forward never runs layer 7 (drop: Dropout)"}},
		{"child called with a mask", "  factory: tinygpt:masked\n" + gpt,
			[]string{"Masked's forward calls layer 1 (blocks.0: MaskBlock) with 2 arguments (Tensor, Tensor): a pipeline stage hands one tensor to the next"}},
		{"token ids without input_dtype", "  factory: tinygpt:build\n  input_shape: [16]\n",
			[]string{"hvd.yaml:7:16: model.input_shape: tinygpt:build: running build() (a GPT) on a sample batch failed in layer 0 (embed: Embed): RuntimeError",
				"(layer 0 (embed: Embed) holds an nn.Embedding: if the model takes token ids, set model.input_dtype: int64)"}},
		{"ids without an embedding", "  factory: tinygpt:no_embedding\n" + gpt,
			[]string{"hvd.yaml:8:16: model.input_dtype: tinygpt:no_embedding: model.input_dtype is int64 (ids), but layer 0 (Linear) holds no nn.Embedding"}},
		{"integer activation", "  factory: tinygpt:int_output\n  input_shape: [16]\n",
			[]string{"layer 1 (Argmax) outputs int64 values: gradients flow back across the cuts between stages"}},
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
