package main

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/hvdorg/hvd/plugins/internal/pypkg"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
	"github.com/hvdorg/hvd/sdk/plugin"
)

var framework = pyprobe.Framework{
	Module:    "mxnet",
	GPU:       "(fw.device if hasattr(fw, 'device') else fw.context).num_gpus()",
	Supported: pyprobe.MustRange(">=1.6,<2"),
}

// dtypes the generated module accepts (framework dtype names); the same
// list feeds Describe and the generated code.
var dtypes = []string{"uint8", "int8", "int32", "int64", "float16", "float32", "float64"}

//go:embed templates/__init__.py.tmpl
var initTemplate string

type adapter struct{}

var _ plugin.FrameworkAdapter = adapter{}

func (adapter) Describe(context.Context) (*plugin.Description, error) {
	return &plugin.Description{
		Framework:         "mxnet",
		PluginVersion:     plugin.SDKVersion,
		ProtocolVersion:   plugin.ProtocolVersion,
		PackageVersion:    pypkg.Version(),
		PythonModule:      framework.Module,
		FrameworkVersions: framework.Supported.String(),
		DTypes:            dtypes,
		Devices:           []string{"cpu"},
		GenerateKinds:     []string{plugin.KindPackage},
	}, nil
}

func (adapter) Probe(ctx context.Context, req plugin.ProbeRequest) (*plugin.ProbeResult, error) {
	return pyprobe.Probe(ctx, req.Python, framework)
}

func (adapter) Generate(_ context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	if req.Kind != plugin.KindPackage {
		return nil, fmt.Errorf("%w: mxnet answers %q, not %q", plugin.ErrUnsupportedKind, plugin.KindPackage, req.Kind)
	}
	return generatePackage()
}

func generatePackage() (*plugin.FileSet, error) {
	set, err := pypkg.Select(append(pypkg.Core, pypkg.NumpyCore...)...)
	if err != nil {
		return nil, err
	}
	src, err := pypkg.Render("hvd/mxnet/__init__.py", initTemplate, map[string]any{
		"PackageVersion": pypkg.Version(),
		"PluginVersion":  plugin.SDKVersion,
		"Supported":      framework.Supported.String(),
		"DTypes":         dtypes,
	})
	if err != nil {
		return nil, err
	}
	return pypkg.Merge(set, plugin.File{Path: "hvd/mxnet/__init__.py", Data: src, Mode: 0o644}), nil
}
