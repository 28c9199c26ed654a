// Package split is the model-parallel split generator: from hvd.yaml's model
// and parallel sections it computes the stage partition (codegen/partition),
// the rank topology and process sets, and writes the per-stage modules, the
// pipeline schedule (GPipe or 1F1B) and a train.py for the spec's framework.
//
// Pure: spec and layer descriptions in, files out. The layer descriptions
// come either from Catalogue (the layers declared in hvd.yaml, resolved from
// a built-in table of layer types) or from the framework plugin, which
// imports a factory model in the user's interpreter and measures it.
package split

import "github.com/hvdorg/hvd/codegen/spec"

// Layer is one layer as the generator sees it.
type Layer struct {
	Index int // position in the model, 0-based
	// Name is the layer's path in a factory model, for
	// Module.get_submodule ("2" in a Sequential, "blocks.0" for the first
	// entry of a ModuleList child named blocks); "" for declared layers.
	Name   string
	Type   string     // class name as written in the spec or found by inspection ("Linear")
	Args   []spec.Arg // constructor keyword arguments (declared models); nil for factory models
	Params int64      // trainable parameter count
	// InShape and OutShape are the per-sample shapes (no batch dimension)
	// the layer takes and produces; nil when unknown.
	InShape, OutShape []int
	// Cost is the relative compute cost per sample: the spec's cost hint
	// when given, else a measurement (plugin) or an estimate (Catalogue).
	Cost float64
}

// Model is what the generator splits.
type Model struct {
	Layers []Layer
	// Factory is the spec's "module:function" when the layers came from an
	// inspected factory model ("" for declared layers).
	Factory string
	// InShape is the per-sample input shape of the whole model.
	InShape []int
	// ImportRoot is the directory the factory's module is imported from,
	// relative to the generated files (slash-separated, e.g. ".." when the
	// code is written to split/ next to hvd.yaml); "" leaves sys.path
	// alone (the module must then be on PYTHONPATH).
	ImportRoot string
	// DType is the element type the inspection or generated code uses
	// ("float32" unless the plugin says otherwise).
	DType string
	// InputDType is "int64" or "int32" when the model's input is ids
	// (token ids for a first nn.Embedding), "" for floating inputs (in the
	// job's dtype). InputHigh bounds the ids (0 <= id < InputHigh): the
	// generated job's synthetic data draws them below it.
	InputDType string
	InputHigh  int
}
