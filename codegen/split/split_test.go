package split

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/hvdorg/hvd/codegen/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.txtar")

// python is the interpreter with torch and numpy (Debian's python3-torch).
const python = "/usr/bin/python3"

type genCase struct {
	name string
	spec func() *spec.Spec
	// model: nil resolves the spec with Catalogue; else the model a plugin
	// would have produced (factory models).
	model func() *Model
}

func withParallel(s *spec.Spec, p, d, m int, sched spec.Schedule) *spec.Spec {
	s.Parallel = &spec.Parallel{Stages: p, DataParallel: d, MicroBatches: m, Schedule: sched}
	if !s.Has(spec.GenSplit) {
		s.Generate = append(s.Generate, spec.GenSplit)
	}
	return s
}

func defaultSpec(fw spec.Framework) *spec.Spec {
	s := spec.Default(fw)
	s.Project = "demo-" + string(fw)
	if fw == spec.TensorFlow {
		s.Model.InputShape = []int{16} // Keras's first Dense does not say its input size
	}
	return s
}

// factoryModel is what the plugin reports for testdata/sim/factorynet.py
// (measured costs are made up but fixed).
func factoryModel(fw spec.Framework) func() *Model {
	return func() *Model {
		lin, act1, act2 := "Linear", "Tanh", "GELU"
		if fw != spec.PyTorch {
			lin, act1, act2 = "Dense", "Activation", "Activation"
		}
		return &Model{
			Factory: "factorynet:build", InShape: []int{8}, DType: "float32",
			Layers: []Layer{
				{Index: 0, Type: lin, Params: 8*32 + 32, InShape: []int{8}, OutShape: []int{32}, Cost: 0.012},
				{Index: 1, Type: act1, InShape: []int{32}, OutShape: []int{32}, Cost: 0.003},
				{Index: 2, Type: lin, Params: 32*32 + 32, InShape: []int{32}, OutShape: []int{32}, Cost: 0.02},
				{Index: 3, Type: act2, InShape: []int{32}, OutShape: []int{32}, Cost: 0.004},
				{Index: 4, Type: lin, Params: 32*3 + 3, InShape: []int{32}, OutShape: []int{3}, Cost: 0.006},
			},
		}
	}
}

func factorySpec(fw spec.Framework) func() *spec.Spec {
	return func() *spec.Spec {
		s := spec.Default(fw)
		s.Project = "factory-" + string(fw)
		s.Model = &spec.Model{Factory: "factorynet:build"}
		return withParallel(s, 2, 1, 2, spec.OneFOneB)
	}
}

// gptFactoryModel is what the plugin reports for testdata/sim/tinygpt.py
// (a GPT whose forward runs a ModuleList of blocks; token ids in, as
// model.input_dtype: int64 says; costs made up but fixed).
func gptFactoryModel() *Model {
	m := &Model{Factory: "tinygpt:build", InShape: []int{16}, DType: "float32", InputDType: "int64", InputHigh: 64}
	add := func(name, typ string, params int64, in, out []int, cost float64) {
		m.Layers = append(m.Layers, Layer{Index: len(m.Layers), Name: name, Type: typ, Params: params, InShape: in, OutShape: out, Cost: cost})
	}
	hidden := []int{16, 32}
	add("embed", "Embed", 64*32+16*32, []int{16}, hidden, 30)
	for i := range 4 {
		add(fmt.Sprintf("blocks.%d", i), "Block", 12704, hidden, hidden, 1100)
	}
	add("ln_f", "LayerNorm", 64, hidden, hidden, 18)
	add("head", "Linear", 32*64, hidden, []int{16, 64}, 120)
	return m
}

// gptTrainSpec: tinygpt cut into 2 stages × 2 replicas, trained on
// tokens.py's data and cross-entropy (train.data, train.loss).
func gptTrainSpec() *spec.Spec {
	s := spec.Default(spec.PyTorch)
	s.Project = "tinygpt"
	s.Model = &spec.Model{Factory: "tinygpt:build", InputShape: []int{16}, InputDType: "int64"}
	s.Train = &spec.Train{Data: "tokens:batches", Loss: "tokens:cross_entropy"}
	return withParallel(s, 2, 2, 2, spec.OneFOneB)
}

// The golden cases: each framework with P=2 D=2 M=4 1f1b, P=3 D=1 gpipe,
// and a factory model; and a PyTorch GPT factory (not an nn.Sequential)
// with token ids and the user's data and loss.
var cases = func() []genCase {
	var out []genCase
	for _, fw := range []spec.Framework{spec.PyTorch, spec.TensorFlow, spec.MXNet} {
		out = append(out,
			genCase{string(fw) + "-2x2-1f1b", func() *spec.Spec { return withParallel(defaultSpec(fw), 2, 2, 4, spec.OneFOneB) }, nil},
			genCase{string(fw) + "-3x1-gpipe", func() *spec.Spec { return withParallel(defaultSpec(fw), 3, 1, 4, spec.GPipe) }, nil},
			genCase{string(fw) + "-factory", factorySpec(fw), factoryModel(fw)},
		)
	}
	out = append(out, genCase{"pytorch-factory-gpt-train", gptTrainSpec, func() *Model {
		m := gptFactoryModel()
		m.ImportRoot = ".." // hvdgen's default: split/ next to hvd.yaml
		return m
	}})
	return out
}()

func generate(t *testing.T, c genCase) *Result {
	t.Helper()
	s := c.spec()
	if err := s.Validate(); err != nil {
		t.Fatalf("%s: the test's spec is invalid: %v", c.name, err)
	}
	var m *Model
	if c.model != nil {
		m = c.model()
	} else {
		var err error
		if m, err = Catalogue(s); err != nil {
			t.Fatalf("%s: Catalogue: %v", c.name, err)
		}
	}
	r, err := Generate(s, m)
	if err != nil {
		t.Fatalf("%s: Generate: %v", c.name, err)
	}
	return r
}

// checkGolden compares r's files with testdata/golden/<name>.txtar (with
// -update: writes it and returns false, so the caller checks nothing more).
func checkGolden(t *testing.T, name, comment string, r *Result) bool {
	t.Helper()
	ar := &txtar.Archive{Comment: []byte(comment)}
	for _, p := range r.Paths() {
		ar.Files = append(ar.Files, txtar.File{Name: p, Data: r.Files[p]})
	}
	got := txtar.Format(ar)
	path := filepath.Join("testdata", "golden", name+".txtar")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return false
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale (go test -update if intended)", path)
	}
	return true
}

func writeFiles(t *testing.T, dir string, r *Result) {
	t.Helper()
	for _, p := range r.Paths() {
		path := filepath.Join(dir, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, r.Files[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Golden files: every generated file of every case
// (testdata/golden/<case>.txtar), deterministic output.
func TestGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := generate(t, c)
			if !checkGolden(t, c.name, "hvdgen split output; rewrite with go test -update\n", r) {
				return
			}
			again := generate(t, c)
			if !reflect.DeepEqual(r.Files, again.Files) {
				t.Error("not deterministic")
			}
			for _, f := range []string{"model.py", "topology.py", "pipeline.py", "train.py", "README.md", "topology.svg"} {
				if _, ok := r.Files[f]; !ok {
					t.Errorf("no %s", f)
				}
			}
			readme := string(r.Files["README.md"])
			if !strings.Contains(readme, r.Table) || !strings.Contains(readme, r.Topology.Table()) || !strings.Contains(readme, "![topology](topology.svg)") {
				t.Error("README.md lacks the partition table, the topology table or the picture")
			}
			if runnable := !strings.Contains(readme, "Not runnable or tested here"); !runnable {
				t.Errorf("README says runnable=%v", runnable)
			}
		})
	}
}

// The data the templates get: the topology tables in topology.py agree
// with the topology, the stages with the plan.
func TestGeneratedTopology(t *testing.T) {
	r := generate(t, cases[0]) // pytorch 2x2
	src := string(r.Files["topology.py"])
	for _, want := range []string{
		"PROCESS_SET_RANKS = [\n    [0, 1],  # id 1: data-parallel set of stage 0\n    [2, 3],  # id 2: data-parallel set of stage 1\n    [0, 2],  # id 3: pipeline set of replica 0; pair stage 0 → 1 of replica 0\n    [1, 3],",
		"DATA_PARALLEL_SET = [1, 2]", "PIPELINE_SET = [3, 4]", "PAIR_SET = [[3, 4]]",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("topology.py lacks %q", want)
		}
	}
	model := string(r.Files["model.py"])
	if !strings.Contains(model, "STAGE_LAYERS = [(0, 2), (2, 5)]") || !strings.Contains(model, "STAGE_INPUT_SHAPES = [(16,), (64,)]") {
		t.Errorf("model.py stages:\n%s", model)
	}
	r3 := generate(t, cases[1]) // pytorch 3x1
	if src := string(r3.Files["topology.py"]); !strings.Contains(src, "PIPELINE_SET = [0]") || !strings.Contains(src, "PAIR_SET = [[4], [5]]") {
		t.Errorf("3x1 topology.py:\n%s", src)
	}
}

func havePython(t *testing.T, modules string) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s: the generated Python is not checked", python)
	}
	if out, err := exec.Command(python, "-c", "import "+modules).CombinedOutput(); err != nil {
		t.Skipf("%s cannot import %s (%v: %s): apt-get install python3-torch python3-numpy", python, modules, err, out)
	}
}

// Every generated Python file of every framework byte-compiles (for
// TensorFlow and MXNet, which cannot be installed here, that is all that
// is checked).
func TestPyCompile(t *testing.T) {
	havePython(t, "py_compile")
	for _, c := range cases {
		dir := t.TempDir()
		r := generate(t, c)
		writeFiles(t, dir, r)
		var py []string
		for _, p := range r.Paths() {
			if strings.HasSuffix(p, ".py") {
				py = append(py, filepath.Join(dir, p))
			}
		}
		if len(py) != 4 {
			t.Errorf("%s: %d Python files", c.name, len(py))
		}
		args := append([]string{"-m", "py_compile"}, py...)
		if out, err := exec.Command(python, args...).CombinedOutput(); err != nil {
			t.Errorf("%s: py_compile: %v\n%s", c.name, err, out)
		}
	}
}

// The spec and model errors Generate reports for plugin-built models.
func TestGenerateErrors(t *testing.T) {
	fs := factorySpec(spec.PyTorch)
	for _, c := range []struct {
		name   string
		spec   func() *spec.Spec
		model  func(m *Model)
		want   string
		isSpec bool
	}{
		{"more stages than layers", func() *spec.Spec { s := fs(); s.Parallel.Stages = 6; return s }, nil,
			"parallel.stages: 6 stages but the model has 5 layers: every stage needs at least one layer (use at most 5 stages)", true},
		{"shapes do not chain", fs, func(m *Model) { m.Layers[2].InShape = []int{30} },
			"model.factory: layer 2 (Linear) expects 30 features but layer 1 (Tanh) produces 32", true},
		{"input does not chain", fs, func(m *Model) { m.InShape = []int{9} },
			"model.factory: layer 0 (Linear) expects 8 features but the model input produces 9", true},
		{"unknown output shape", fs, func(m *Model) { m.Layers[3].OutShape = nil },
			"model.factory: layer 3 (GELU): its output shape is unknown, and the generated pipeline needs every activation's shape", true},
		{"unknown input shape", fs, func(m *Model) { m.InShape = nil },
			"model.factory: the model's input shape is unknown: set model.input_shape", true},
		{"bad cost", fs, func(m *Model) { m.Layers[1].Cost = -1 },
			"model.factory: layer 1 (Tanh) has cost -1: costs must be finite and >= 0", true},
		{"go framework", func() *spec.Spec { s := fs(); s.Framework = spec.Go; return s }, nil,
			`framework: the split generator supports pytorch, tensorflow and mxnet, not "go"`, true},
		{"no parallel", func() *spec.Spec { s := fs(); s.Parallel = nil; return s }, nil,
			"parallel: the split generator needs a parallel section", true},
		{"train for keras", func() *spec.Spec {
			s := withParallel(defaultSpec(spec.TensorFlow), 2, 1, 2, spec.GPipe)
			s.Train = &spec.Train{Loss: "losses:mine"}
			return s
		}, nil, "train: your own data and loss (train.data, train.loss) are wired into the pytorch split job only, so far; " +
			"the tensorflow job trains on its seeded synthetic data with a mean squared error: remove the train section", true},
		{"ids for gluon", func() *spec.Spec {
			s := withParallel(defaultSpec(spec.MXNet), 2, 1, 2, spec.GPipe)
			s.Model.InputDType = "int64"
			return s
		}, nil, "model.input_dtype: integer inputs (ids) are split for pytorch factory models only, so far", true},
		{"ids for declared layers", func() *spec.Spec {
			s := withParallel(defaultSpec(spec.PyTorch), 2, 1, 2, spec.GPipe)
			s.Model.InputDType = "int64"
			return s
		}, nil, "model.input_dtype: int64 input (ids) needs a factory model whose first layer embeds the ids (e.g. an nn.Embedding): declared layers take floating-point features", true},
	} {
		var m *Model
		if s := c.spec(); s.Model.Factory == "" {
			var err error
			if m, err = Catalogue(s); err != nil {
				t.Fatalf("%s: Catalogue: %v", c.name, err)
			}
		} else {
			m = factoryModel(spec.PyTorch)()
		}
		if c.model != nil {
			c.model(m)
		}
		_, err := Generate(c.spec(), m)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %q", c.name, err, c.want)
			continue
		}
		var se *spec.Error
		if c.isSpec && (!errors.As(err, &se) || !errors.Is(err, spec.ErrInvalid)) {
			t.Errorf("%s: %v is not a *spec.Error", c.name, err)
		}
	}
}
