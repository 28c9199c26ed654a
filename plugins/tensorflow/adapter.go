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
	Module:    "tensorflow",
	GPU:       "len(fw.config.list_physical_devices('GPU'))",
	Supported: pyprobe.MustRange(">=2.6,<3"),
}

// dtypes the generated module accepts (framework dtype names); the same
// list feeds Describe and the generated code.
var dtypes = []string{"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool"}

//go:embed templates/__init__.py.tmpl
var initTemplate string

type adapter struct{}

var _ plugin.FrameworkAdapter = adapter{}

func (adapter) Describe(context.Context) (*plugin.Description, error) {
	return &plugin.Description{
		Framework:         "tensorflow",
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
		return nil, fmt.Errorf("%w: tensorflow answers %q, not %q", plugin.ErrUnsupportedKind, plugin.KindPackage, req.Kind)
	}
	return generatePackage()
}

func generatePackage() (*plugin.FileSet, error) {
	set, err := pypkg.Select(append(pypkg.Core, pypkg.NumpyCore...)...)
	if err != nil {
		return nil, err
	}
	src, err := pypkg.Render("hvd/tensorflow/__init__.py", initTemplate, map[string]any{
		"PackageVersion": pypkg.Version(),
		"PluginVersion":  plugin.SDKVersion,
		"Supported":      framework.Supported.String(),
		"DTypes":         dtypes,
	})
	if err != nil {
		return nil, err
	}
	return pypkg.Merge(set, plugin.File{Path: "hvd/tensorflow/__init__.py", Data: src, Mode: 0o644}), nil
}
