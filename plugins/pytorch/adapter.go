package main

import (
	"context"
	"fmt"

	"github.com/hvdorg/hvd/codegen/scaffold"
	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/pypkg"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
	"github.com/hvdorg/hvd/plugins/internal/splitgen"
)

var framework = pyprobe.Framework{
	Module:    "torch",
	GPU:       "fw.cuda.device_count() if fw.cuda.is_available() else 0",
	Supported: pyprobe.MustRange(">=1.13,<3"),
}

type adapter struct{}

var _ plugin.FrameworkAdapter = adapter{}

func (adapter) Describe(context.Context) (*plugin.Description, error) {
	return &plugin.Description{
		Framework:         "pytorch",
		PluginVersion:     plugin.SDKVersion,
		ProtocolVersion:   plugin.ProtocolVersion,
		PackageVersion:    pypkg.Version(),
		PythonModule:      framework.Module,
		FrameworkVersions: framework.Supported.String(),
		DTypes:            []string{"uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"},
		Devices:           []string{"cpu"},
		GenerateKinds:     []string{plugin.KindPackage, plugin.KindScaffold, plugin.KindSplit},
	}, nil
}

func (adapter) Probe(ctx context.Context, req plugin.ProbeRequest) (*plugin.ProbeResult, error) {
	return pyprobe.Probe(ctx, req.Python, framework)
}

func (adapter) Generate(ctx context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	switch req.Kind {
	case plugin.KindSplit:
		// Declared layers come from split.Catalogue; a factory model is
		// imported and measured in the request's interpreter.
		return splitgen.Generate(ctx, req, spec.PyTorch, inspectFactory, "")
	case plugin.KindPackage:
		return pypkg.Select(append(pypkg.Core, "hvd/torch")...)
	case plugin.KindScaffold:
		files, err := scaffold.Generate(scaffold.Options{Framework: "pytorch", Name: req.Options["name"]})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", plugin.ErrInvalidRequest, err)
		}
		set := &plugin.FileSet{}
		for _, p := range scaffold.Paths(files) {
			set.Add(p, files[p])
		}
		return set, set.Validate()
	default:
		return nil, fmt.Errorf("%w: pytorch answers %q, %q and %q, not %q", plugin.ErrUnsupportedKind, plugin.KindPackage, plugin.KindScaffold, plugin.KindSplit, req.Kind)
	}
}
