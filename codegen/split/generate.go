package split

import (
	"bytes"
	"embed"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/hvdorg/hvd/codegen/partition"
	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/codegen/topology"
)

// Result is a generated split job.
type Result struct {
	// Files are the generated files by slash-separated path relative to
	// the output directory ("train.py", "README.md", "topology.svg").
	Files map[string][]byte
	// Plan is the stage partition; Table its Markdown explanation (also in
	// README.md), for hvdgen to print.
	Plan  *partition.Plan
	Table string
	// Memory estimates each stage's memory at the default batch (Markdown,
	// also in README.md).
	Memory string
	// Topology is the rank layout and its process sets (nil for a
	// transformer job, whose sets are in Sets).
	Topology *topology.Topology
	// Sets describes a transformer job's process sets (Markdown), "" for
	// the others.
	Sets string
}

// Paths returns the result's file paths, sorted.
func (r *Result) Paths() []string {
	p := make([]string, 0, len(r.Files))
	for k := range r.Files {
		p = append(p, k)
	}
	sort.Strings(p)
	return p
}

// Runnable reports whether the generated code for a framework is run by
// hvd's own tests against its single-process reference: PyTorch here
// (e2e_test.go), TensorFlow and MXNet in plugins/tensorflow and
// plugins/mxnet (split_test.go, in the framework venvs). A framework
// whose jobs were never run gets a README that says so.
func Runnable(fw spec.Framework) bool {
	return fw == spec.PyTorch || fw == spec.TensorFlow || fw == spec.MXNet
}

//go:embed templates
var templateFS embed.FS

// frameworks: what each Python framework's files are called and made of.
var frameworks = map[spec.Framework]struct {
	title, hvdModule string
	files            []string // templates/<fw>/<file>.tmpl, plus the common ones
}{
	spec.PyTorch:    {"PyTorch", "hvd.torch", []string{"model.py", "pipeline.py", "train.py"}},
	spec.TensorFlow: {"TensorFlow (Keras)", "hvd.tensorflow", []string{"model.py", "pipeline.py", "train.py"}},
	spec.MXNet:      {"MXNet (Gluon)", "hvd.mxnet", []string{"model.py", "pipeline.py", "train.py"}},
}

// commonFiles are rendered from templates/common for every framework.
var commonFiles = []string{"topology.py", "README.md"}

// Generate partitions the model into the spec's pipeline stages (by layer
// cost, with codegen/partition), lays out the ranks (codegen/topology) and
// renders the job for the spec's framework: model.py, topology.py,
// pipeline.py, train.py, README.md and topology.svg.
//
// m comes from Catalogue (declared layers) or from the framework plugin's
// inspection of a factory model. Generate checks what the generated code
// relies on: a parallel section, a Python framework, at least as many
// layers as stages, finite non-negative costs, known shapes for the model
// input and every layer output, and shapes that chain from layer to layer.
// Problems are *spec.Error values positioned at the layer (declared
// models) or at model.factory (factory models), returned as a
// spec.ErrorList. Pure: the caller writes the files.
func Generate(s *spec.Spec, m *Model) (*Result, error) {
	fw, ok := frameworks[s.Framework]
	switch {
	case !ok:
		return nil, spec.ErrorList{s.ErrorAt("framework", "the split generator supports pytorch, tensorflow and mxnet, not %q", s.Framework)}
	case s.Parallel == nil:
		return nil, spec.ErrorList{s.ErrorAt("parallel", "the split generator needs a parallel section (stages, data_parallel, micro_batches, schedule)")}
	case m == nil || len(m.Layers) == 0:
		return nil, spec.ErrorList{s.ErrorAt("model", "the model has no layers to split")}
	}
	pl := s.Parallel
	if pl.Stages > len(m.Layers) {
		return nil, spec.ErrorList{s.ErrorAt("parallel.stages", "%d stages but the model has %d layers: every stage needs at least one layer (use at most %d stages)", pl.Stages, len(m.Layers), len(m.Layers))}
	}
	if pl.MicroBatches < 1 || pl.DataParallel < 1 || pl.Stages < 1 {
		return nil, spec.ErrorList{s.ErrorAt("parallel", "stages, data_parallel and micro_batches must be at least 1 (got %d, %d, %d)", pl.Stages, pl.DataParallel, pl.MicroBatches)}
	}
	if !slices.Contains(spec.Schedules, pl.Schedule) {
		return nil, spec.ErrorList{s.ErrorAt("parallel.schedule", "unknown schedule %q: expected gpipe or 1f1b", pl.Schedule)}
	}
	if err := checkModel(s, m); err != nil {
		return nil, err
	}
	if err := checkTrain(s, m); err != nil {
		return nil, err
	}
	esize := dtypeSize(m.DType)
	layers := make([]partition.Layer, len(m.Layers))
	for i, l := range m.Layers {
		layers[i] = partition.Layer{Name: l.Type, Cost: l.Cost, Params: l.Params, OutBytes: int64(prod(l.OutShape)) * esize}
	}
	plan, err := partition.Partition(layers, pl.Stages)
	if err != nil {
		return nil, spec.ErrorList{s.ErrorAt("model", "%v", err)}
	}
	topo, err := topology.New(pl.Stages, pl.DataParallel)
	if err != nil {
		return nil, spec.ErrorList{s.ErrorAt("parallel", "%v", err)}
	}
	d := newData(s, m, plan, topo, fw.title, fw.hvdModule)
	res := &Result{Files: map[string][]byte{}, Plan: plan, Table: plan.Table(), Memory: d.MemoryTable, Topology: topo}
	for _, f := range fw.files {
		out, err := render(s.Framework, f, d)
		if err != nil {
			return nil, err
		}
		res.Files[f] = out
	}
	for _, f := range commonFiles {
		out, err := render(s.Framework, f, d)
		if err != nil {
			return nil, err
		}
		res.Files[f] = out
	}
	res.Files["topology.svg"] = topo.SVG()
	return res, nil
}

// checkModel checks what the generated code needs of the layers.
func checkModel(s *spec.Spec, m *Model) error {
	var errs spec.ErrorList
	at := func(i int) string {
		if m.Factory != "" {
			return "model.factory"
		}
		return fmt.Sprintf("model.layers[%d]", i)
	}
	if len(m.InShape) == 0 {
		path := "model.input_shape"
		if m.Factory != "" {
			path = "model.factory"
		}
		errs = append(errs, s.ErrorAt(path, "the model's input shape is unknown: set model.input_shape"))
	}
	prev := m.InShape
	prevName := "the model input"
	for i, l := range m.Layers {
		name := fmt.Sprintf("layer %d (%s)", i, l.Type)
		switch {
		case l.Index != i:
			errs = append(errs, s.ErrorAt(at(i), "%s has index %d: layers must be listed in order", name, l.Index))
		case !(l.Cost >= 0) || l.Cost > 1e300:
			errs = append(errs, s.ErrorAt(at(i), "%s has cost %v: costs must be finite and >= 0", name, l.Cost))
		case l.Params < 0:
			errs = append(errs, s.ErrorAt(at(i), "%s has %d parameters", name, l.Params))
		case len(l.OutShape) == 0:
			errs = append(errs, s.ErrorAt(at(i), "%s: its output shape is unknown, and the generated pipeline needs every activation's shape", name))
		case l.InShape != nil && prev != nil && !slices.Equal(l.InShape, prev):
			errs = append(errs, s.ErrorAt(at(i), "%s expects %s but %s produces %s", name, shapeWords(l.InShape), prevName, shapeWords(prev)))
		}
		for _, d := range l.OutShape {
			if d < 1 {
				errs = append(errs, s.ErrorAt(at(i), "%s has output shape %v: dimensions must be positive", name, l.OutShape))
				break
			}
		}
		prev, prevName = l.OutShape, name
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// checkTrain checks what the generated train.py supports of the user's
// data and loss (train.data, train.loss) and of integer inputs: both are
// wired into the PyTorch job; the Keras and Gluon jobs train on their
// seeded synthetic data with MSE, so they refuse them here rather than
// ignore them.
func checkTrain(s *spec.Spec, m *Model) error {
	var errs spec.ErrorList
	ids := m.InputDType != "" || (s.Model != nil && s.Model.IntegerInput())
	if s.Framework != spec.PyTorch {
		if t := s.Train; t != nil && (t.Data != "" || t.Loss != "") {
			errs = append(errs, s.ErrorAt("train", "your own data and loss (train.data, train.loss) are wired into the pytorch split job only, so far; "+
				"the %s job trains on its seeded synthetic data with a mean squared error: remove the train section", s.Framework))
		}
		if ids {
			errs = append(errs, s.ErrorAt("model.input_dtype", "integer inputs (ids) are split for pytorch factory models only, so far"))
		}
	} else if ids && m.Factory == "" {
		errs = append(errs, s.ErrorAt("model.input_dtype", "%s input (ids) needs a factory model whose first layer embeds the ids (e.g. an nn.Embedding): "+
			"declared layers take floating-point features", s.Model.InputDType))
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// shapeWords says a shape the way errors do: "32 features" for 1-D,
// "shape [3 32 32]" otherwise.
func shapeWords(s []int) string {
	if len(s) == 1 {
		return fmt.Sprintf("%d features", s[0])
	}
	return fmt.Sprintf("shape %v", s)
}

func prod(s []int) int {
	p := 1
	for _, d := range s {
		p *= d
	}
	return p
}

func dtypeSize(dt string) int64 {
	switch dt {
	case "float64", "int64":
		return 8
	case "float16", "bfloat16":
		return 2
	}
	return 4
}

// ---- template data ----

type data struct {
	Project, SpecName, Framework, Title, HvdModule string
	Runnable                                       bool
	Stages, Replicas, Size, MicroBatches           int
	Schedule                                       string
	DType                                          string
	BatchSize                                      int
	Factory, FactoryLiteral                        string
	ImportRootLiteral                              string // Python literal; "" when not set
	// The model's input: InputDType a torch dtype ("torch.int64") when it
	// is ids below InputHigh, "None" for floats in the job's dtype.
	InputDType string
	InputHigh  int
	// The user's data and loss (train.data, train.loss) as Python string
	// literals, "None" for the generated ones; TrainImportRoot the
	// directory they are imported from, relative to train.py ("None":
	// sys.path as it is).
	Data, Loss, TrainImportRoot                     string
	DataFn, LossFn                                  string // as written in hvd.yaml (module:function), "" when not given
	InputShape, OutputShape                         string // Python tuples
	Layers                                          []tmplLayer
	StageList                                       []tmplStage
	Sets                                            []tmplSet
	DPSets, PipelineSets, PairSets                  string // Python lists of set ids
	PlanTable, TopologyTable, TopologyTableIndented string
	MemoryTable                                     string // Markdown: memory per stage at the default batch
	Bubble                                          string
}

type tmplLayer struct {
	Index, Stage int
	Type         string
	Name         string // Python literal of the factory layer's path ("'blocks.0'"); "" for declared layers
	Ctor         string // the framework's constructor call (declared layers)
	Params       int64
	In, Out      string // Python tuples
	// Python expression of the per-sample input shape (for building the
	// layer in frameworks that create weights lazily).
	InTuple string
}

type tmplStage struct {
	Index, First, End int
	In, Out           string // Python tuples
	Params            int64
}

type tmplSet struct {
	ID    int
	Ranks string
	Uses  string
}

func newData(s *spec.Spec, m *Model, plan *partition.Plan, topo *topology.Topology, title, hvdModule string) *data {
	pl := s.Parallel
	d := &data{
		Project: s.Project, SpecName: specName(s), Framework: string(s.Framework), Title: title, HvdModule: hvdModule,
		Runnable: Runnable(s.Framework), Stages: pl.Stages, Replicas: pl.DataParallel, Size: pl.Ranks(),
		MicroBatches: pl.MicroBatches, Schedule: string(pl.Schedule), DType: m.DType, Factory: m.Factory,
		InputShape: pyShape(m.InShape), OutputShape: pyShape(m.Layers[len(m.Layers)-1].OutShape),
		PlanTable: plan.Table(), Bubble: fmt.Sprintf("%.3f", partition.Bubble(pl.Stages, pl.MicroBatches)),
	}
	if d.Project == "" {
		d.Project = "model"
	}
	if d.DType != "float64" {
		d.DType = "float32"
	}
	d.InputDType, d.Data, d.Loss, d.TrainImportRoot = "None", "None", "None", "None"
	if m.InputDType != "" {
		d.InputDType, d.InputHigh = "torch."+m.InputDType, m.InputHigh
	}
	if t := s.Train; t != nil && (t.Data != "" || t.Loss != "") {
		if t.Data != "" {
			d.Data, d.DataFn = pyLiteral(t.Data), t.Data
		}
		if t.Loss != "" {
			d.Loss, d.LossFn = pyLiteral(t.Loss), t.Loss
		}
		if m.ImportRoot != "" {
			d.TrainImportRoot = pyLiteral(m.ImportRoot)
		}
	}
	if m.Factory != "" {
		d.FactoryLiteral = pyLiteral(m.Factory)
		if m.ImportRoot != "" {
			d.ImportRootLiteral = pyLiteral(m.ImportRoot)
		}
	}
	// The default global batch: the smallest multiple of replicas ×
	// micro-batches that is at least 64.
	unit := pl.DataParallel * pl.MicroBatches
	d.BatchSize = (64 + unit - 1) / unit * unit
	stageOf := make([]int, len(m.Layers))
	for si, st := range plan.Stages {
		for i := st.First; i < st.End; i++ {
			stageOf[i] = si
		}
		in := m.InShape
		if st.First > 0 {
			in = m.Layers[st.First-1].OutShape
		}
		d.StageList = append(d.StageList, tmplStage{Index: si, First: st.First, End: st.End, In: pyShape(in), Out: pyShape(m.Layers[st.End-1].OutShape), Params: st.Params})
	}
	d.MemoryTable = memoryTable(plan, m, pl, d.BatchSize)
	for i, l := range m.Layers {
		in := m.InShape
		if i > 0 {
			in = m.Layers[i-1].OutShape
		}
		name := ""
		if m.Factory != "" {
			if name = l.Name; name == "" {
				name = strconv.Itoa(i) // a plugin that does not name layers: the i-th child of a Sequential
			}
			name = pyLiteral(name)
		}
		d.Layers = append(d.Layers, tmplLayer{Index: i, Stage: stageOf[i], Type: l.Type, Name: name, Ctor: ctor(s.Framework, l),
			Params: l.Params, In: pyShape(in), Out: pyShape(l.OutShape)})
	}
	uses := topo.Uses()
	for i, r := range topo.Sets {
		d.Sets = append(d.Sets, tmplSet{ID: i + 1, Ranks: pyInts(r), Uses: strings.Join(uses[i+1], "; ")})
	}
	var dp, pipe []int
	for st := 0; st < topo.Stages; st++ {
		dp = append(dp, topo.DataParallelGroup(st).Set)
	}
	for r := 0; r < topo.Replicas; r++ {
		pipe = append(pipe, topo.PipelineGroup(r).Set)
	}
	var pairs []string
	for st := 0; st+1 < topo.Stages; st++ {
		var row []int
		for r := 0; r < topo.Replicas; r++ {
			row = append(row, topo.PairGroup(st, r).Set)
		}
		pairs = append(pairs, pyInts(row))
	}
	d.DPSets, d.PipelineSets, d.PairSets = pyInts(dp), pyInts(pipe), "["+strings.Join(pairs, ", ")+"]"
	d.TopologyTable = topo.Table()
	var ind strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimRight(d.TopologyTable, "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			ind.WriteString("\n")
			continue
		}
		ind.WriteString("    " + line)
	}
	d.TopologyTableIndented = ind.String()
	return d
}

// specName is the spec's file name without its directory (generated files
// must not depend on where the spec was read from).
func specName(s *spec.Spec) string {
	if f := s.File(); f != "" {
		return filepath.Base(f)
	}
	return "hvd.yaml"
}

func pyInts(v []int) string {
	p := make([]string, len(v))
	for i, x := range v {
		p[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(p, ", ") + "]"
}

// ctor is the constructor call of a declared layer in the framework's
// generated model.py ("" for factory layers).
func ctor(fw spec.Framework, l Layer) string {
	if l.Args == nil && l.Type == "" {
		return ""
	}
	name := l.Type
	if t, ok := tables[fw]; ok {
		for _, p := range t.prefixes {
			if strings.HasPrefix(name, p) {
				name = strings.TrimPrefix(name, p)
				break
			}
		}
	}
	switch fw {
	case spec.PyTorch:
		return "nn." + name + "(" + pyKwargs(l.Args) + ")"
	case spec.TensorFlow:
		return "tf.keras.layers." + name + "(" + pyKwargs(l.Args) + ")"
	case spec.MXNet:
		return "nn." + name + "(" + pyKwargs(l.Args) + ")"
	}
	return ""
}

// templateSets: per framework, its templates and the common ones, by base
// name ("train.py.tmpl").
var templateSets = func() map[spec.Framework]*template.Template {
	sets := map[spec.Framework]*template.Template{}
	for fw := range frameworks {
		sets[fw] = template.Must(template.New("").ParseFS(templateFS, "templates/common/*.tmpl", "templates/"+string(fw)+"/*.tmpl"))
	}
	return sets
}()

func render(fw spec.Framework, file string, d *data) ([]byte, error) {
	t := templateSets[fw].Lookup(file + ".tmpl")
	if t == nil {
		return nil, fmt.Errorf("split: no template %s for %s", file, fw)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("split: %s: %w", file, err)
	}
	return b.Bytes(), nil
}

// memoryTable estimates each stage's memory in float32 at the default
// batch: weights and gradients, and the activations autograd keeps for
// the backward pass (every layer's input, per sample) times the
// micro-batches a stage holds at once — M with GPipe, P − s with 1F1B.
func memoryTable(plan *partition.Plan, m *Model, pl *spec.Parallel, batch int) string {
	const es = 4
	rows := batch / (pl.DataParallel * pl.MicroBatches)
	var b strings.Builder
	fmt.Fprintf(&b, "| stage | weights + gradients | activations kept per sample | micro-batches held (%s) | activations at batch %d (%d rows per micro-batch) |\n", pl.Schedule, batch, rows)
	b.WriteString("|---|---|---|---|---|\n")
	for si, st := range plan.Stages {
		var perSample int64
		for i := st.First; i < st.End; i++ {
			in := m.InShape
			if i > 0 {
				in = m.Layers[i-1].OutShape
			}
			perSample += int64(elems(in)) * es
		}
		held := pl.MicroBatches
		if pl.Schedule == spec.OneFOneB {
			held = min(len(plan.Stages)-si, pl.MicroBatches)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %s |\n", si, partition.HumanBytes(2*es*st.Params), partition.HumanBytes(perSample),
			held, partition.HumanBytes(int64(held)*int64(rows)*perSample))
	}
	b.WriteString("\nEstimates in float32 (float64 doubles them); optimizer state comes on top (none for SGD, 2× the weights for Adam).\n")
	return b.String()
}

func elems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
