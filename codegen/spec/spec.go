// Package spec is the model of hvd.yaml, the project file `hvdgen generate`
// reads: which framework, which generators to run, where the Go bindings go,
// and the model-parallel layout (layers, pipeline stages, data-parallel
// width, micro-batches, schedule) the split generator turns into code.
//
// Parse reads a file strictly: unknown keys, duplicate keys and values of
// the wrong type are errors, every error carries file:line:column and says
// what was expected, and all problems are reported at once (an ErrorList).
// Marshal writes a Spec back as stable, commented YAML that Parse accepts;
// Default gives the spec a new project starts from. The package does no
// I/O.
package spec

import (
	"fmt"
	"slices"
)

// Version is the only spec version this package reads.
const Version = 1

// Framework is the training framework a project uses.
type Framework string

// The frameworks a spec may name.
const (
	PyTorch    Framework = "pytorch"
	TensorFlow Framework = "tensorflow"
	MXNet      Framework = "mxnet"
	Go         Framework = "go"
)

// Frameworks lists every framework, in the order messages name them.
var Frameworks = []Framework{PyTorch, TensorFlow, MXNet, Go}

// Python reports whether the framework is used from Python (everything but
// Go).
func (f Framework) Python() bool { return f == PyTorch || f == TensorFlow || f == MXNet }

// Generator names, as listed under `generate:`.
const (
	// GenBindings: the hvd.<framework> Python package (the framework
	// plugin's "package" kind). Python frameworks only.
	GenBindings = "bindings"
	// GenGoBindings: typed collective methods for Go structs marked
	// //hvd:tensors in the packages the go section names.
	GenGoBindings = "go-bindings"
	// GenSplit: the model-parallel split (process sets, per-stage modules,
	// the pipeline schedule) from the model and parallel sections. Python
	// frameworks only.
	GenSplit = "split"
)

// Generators lists every generator name, in the order messages name them.
var Generators = []string{GenBindings, GenGoBindings, GenSplit}

// Schedule is a pipeline schedule.
type Schedule string

// The pipeline schedules.
const (
	// GPipe runs every micro-batch forward, then every one backward.
	GPipe Schedule = "gpipe"
	// OneFOneB alternates one forward and one backward per stage once the
	// pipeline is full (PipeDream-Flush), bounding live activations by the
	// number of stages.
	OneFOneB Schedule = "1f1b"
)

// Schedules lists every schedule.
var Schedules = []Schedule{GPipe, OneFOneB}

// Defaults filled in by Parse when a key is absent.
const (
	DefaultGoPackage    = "./..."
	DefaultGoOutput     = "hvd_tensors_gen.go"
	DefaultDataParallel = 1
	DefaultMicroBatches = 1
	DefaultSchedule     = GPipe
)

// Limits on the parallel layout (a typo such as stages: 40000 fails early
// instead of generating a job nobody can start).
const (
	MaxStages       = 4096
	MaxDataParallel = 1 << 16
	MaxMicroBatches = 1 << 16
	MaxRanks        = 1 << 20 // stages × data_parallel
)

// Spec is one hvd.yaml.
type Spec struct {
	Version   int       // always Version
	Project   string    // the project's name
	Framework Framework // the training framework
	Generate  []string  // generator names, run in this order
	Go        *GoConfig // where the Go bindings are read and written; nil when absent
	Model     *Model    // the model to split; nil when absent
	Parallel  *Parallel // the parallel layout; nil when absent (set together with Model)
	Train     *Train    // the user's data and loss for the generated job; nil when absent

	file string         // the name given to Parse
	pos  map[string]Pos // position of every key path Parse saw
	bad  map[string]bool
}

// GoConfig is the go section: the Go bindings generator loads Package (a
// go/packages pattern, relative to the directory of hvd.yaml) and writes
// Output (a file name) into the directory of every package that has a
// struct marked //hvd:tensors.
type GoConfig struct {
	Package string
	Output  string
}

// Model is the model to split: an ordered list of layers, a factory
// (Python `module:function` returning an nn.Sequential-like model that the
// framework plugin inspects), or a GPT-style transformer the generator
// knows (GPT). Exactly one of the three is set.
type Model struct {
	Layers  []Layer
	Factory string
	// GPT is a decoder-only transformer (model.gpt): the split generator
	// cuts it at block boundaries and can split every block across a
	// tensor-parallel set. PyTorch only.
	GPT *GPT
	// InputShape is the shape of one input sample, without the batch
	// dimension (e.g. [784], or [3, 32, 32] for images); nil when not
	// given. A factory model needs it (its inspection runs a sample batch
	// through the model) unless its first layer is a Linear, whose
	// in_features gives it; declared layers may give it to fix the shapes
	// the generated code and the partitioner's activation sizes use.
	InputShape []int
	// InputDType is the element type of the model's input (one of
	// InputDTypes; "" when not given: floating point, in the job's
	// dtype). An integer type says the input is ids (token ids for a first
	// nn.Embedding): a factory's inspection feeds ids, and the generated job
	// keeps them integers. Layers and factory models only.
	InputDType string
}

// InputDTypes lists the values model.input_dtype may take.
var InputDTypes = []string{"float32", "float64", "int32", "int64"}

// IntegerInput reports whether the model's input is integer ids.
func (m *Model) IntegerInput() bool { return m.InputDType == "int32" || m.InputDType == "int64" }

// GPT is model.gpt: token and position embeddings, Blocks blocks of
// causal self-attention and MLP (LayerNorm before each, residuals), a
// final LayerNorm and the language-model head, whose weight is the token
// embedding's when Tied.
type GPT struct {
	Vocab  int  // vocabulary size
	SeqLen int  // sequence length (positions)
	Hidden int  // hidden size
	Heads  int  // attention heads; divides Hidden
	Blocks int  // transformer blocks
	FFN    int  // MLP inner size; default 4 × Hidden
	Tied   bool // the head uses the token embedding's weight; default true
}

// Train is the train section: the user's own data and loss for the
// generated job (Python module:function names, imported from the directory
// of hvd.yaml); empty: the generated seeded synthetic data and the
// model's natural loss.
type Train struct {
	Data string
	Loss string
}

// Limits on a GPT.
const (
	MaxGPTDim    = 1 << 20 // vocab, seq_len, hidden, ffn
	MaxGPTBlocks = 4096
)

// Limits on model.input_shape.
const (
	MaxInputRank  = 8       // dimensions
	MaxInputElems = 1 << 30 // elements per sample (the product of the dimensions)
)

// Layer is one layer of the model.
type Layer struct {
	// Type is the framework's layer class, e.g. Linear or nn.Linear.
	Type string
	// Args are the constructor's keyword arguments, in file order.
	Args []Arg
	// Cost is a relative compute cost hint (>= 0, finite); nil: none given.
	Cost *float64
	// Params is the number of parameters (>= 0); nil: none given.
	Params *int64
}

// Arg is one keyword argument of a layer constructor. Value is nil, a
// bool, an int64, a float64 (finite), a string, or a []any of those (lists
// nest at most MaxArgDepth deep).
type Arg struct {
	Name  string
	Value any
}

// MaxArgDepth is how deeply argument lists may nest ([[1, 2], [3, 4]] is 2).
const MaxArgDepth = 3

// Parallel is the parallel layout: Stages pipeline stages, each replicated
// DataParallel times and, for a GPT, split across Tensor ranks (the job has
// Tensor × Stages × DataParallel ranks), MicroBatches micro-batches per
// step, run with Schedule.
type Parallel struct {
	Stages       int
	DataParallel int
	MicroBatches int
	Schedule     Schedule
	// Tensor is the tensor-parallel size T (GPT models only; default 1).
	Tensor int
	// VirtualStages is the number of model chunks per pipeline rank V
	// (interleaved 1F1B when > 1; GPT models only; default 1).
	VirtualStages int
	// Zero shards the optimizer over the data-parallel set: 0 off, 1
	// optimizer state, 2 state and gradients (GPT models only; default 0).
	Zero int
	// Recompute is activation checkpointing: each block keeps only its
	// input and recomputes the rest in backward (GPT models only).
	Recompute bool
}

// Ranks is the number of processes the layout needs (hvdrun -np).
func (p *Parallel) Ranks() int { return max(p.Tensor, 1) * p.Stages * p.DataParallel }

// Pos is a position in the spec file (1-based; 0 when unknown, e.g. for a
// Spec built in Go).
type Pos struct {
	Line, Column int
}

// File returns the file name the spec was parsed from ("" for a Spec built
// in Go).
func (s *Spec) File() string { return s.file }

// Pos returns where the key path (e.g. "parallel.stages",
// "model.layers[2].type") was in the file, or the zero Pos when it was not
// there. The position of a key path is that of its value.
func (s *Spec) Pos(path string) Pos { return s.pos[path] }

// ErrorAt returns an error about the key path, positioned where that path
// was in the file: generators and plugins use it to report problems with a
// layer (`s.ErrorAt("model.layers[3].type", "unknown layer type %q", t)`).
func (s *Spec) ErrorAt(path, format string, args ...any) *Error {
	p := s.pos[path]
	return &Error{File: s.file, Line: p.Line, Column: p.Column, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Has reports whether the generator name is listed under generate.
func (s *Spec) Has(generator string) bool { return slices.Contains(s.Generate, generator) }

// Default returns the spec a new project of the framework starts from (the
// project name is "myproject"; set Project before marshalling). Python
// frameworks generate the bindings and carry a small MLP with a two-stage
// layout that the split generator uses once split is added to generate; Go
// generates go-bindings for every package of the module.
func Default(fw Framework) *Spec {
	s := &Spec{Version: Version, Project: "myproject", Framework: fw}
	if fw == Go {
		s.Generate = []string{GenGoBindings}
		s.Go = &GoConfig{Package: DefaultGoPackage, Output: DefaultGoOutput}
		return s
	}
	s.Generate = []string{GenBindings}
	linear := "Linear"
	switch fw {
	case TensorFlow:
		linear = "Dense"
	case MXNet:
		linear = "Dense"
	}
	s.Model = &Model{Layers: []Layer{
		{Type: linear, Args: denseArgs(fw, 16, 64)},
		{Type: "ReLU"},
		{Type: linear, Args: denseArgs(fw, 64, 64)},
		{Type: "ReLU"},
		{Type: linear, Args: denseArgs(fw, 64, 4)},
	}}
	if fw != PyTorch {
		// Keras and Gluon take the activation as an argument of Dense.
		s.Model.Layers = []Layer{
			{Type: linear, Args: append(denseArgs(fw, 16, 64), Arg{"activation", "relu"})},
			{Type: linear, Args: append(denseArgs(fw, 64, 64), Arg{"activation", "relu"})},
			{Type: linear, Args: denseArgs(fw, 64, 4)},
		}
	}
	// Keras' Dense infers its input size: the sample shape tells the split
	// generator (and documents the model's input for the others).
	s.Model.InputShape = []int{16}
	s.Parallel = &Parallel{Stages: 2, DataParallel: 1, MicroBatches: 4, Schedule: OneFOneB, Tensor: 1, VirtualStages: 1}
	return s
}

func denseArgs(fw Framework, in, out int64) []Arg {
	switch fw {
	case TensorFlow:
		return []Arg{{"units", out}}
	case MXNet:
		return []Arg{{"units", out}, {"in_units", in}}
	}
	return []Arg{{"in_features", in}, {"out_features", out}}
}
