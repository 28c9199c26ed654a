package pypkg

import (
	"context"
	"fmt"

	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
	"github.com/hvdorg/hvd/sdk/plugin"
)

// Templated is a framework adapter whose package is hvd.common, hvd.numpy
// and one module rendered from a template (hvd/<name>/__init__.py): the
// shape of the TensorFlow and MXNet plugins, which run on the numpy-level
// core. Its generated module gets PackageVersion, PluginVersion, Supported
// and DTypes as template data.
type Templated struct {
	Name      string            // framework name, also the module's directory: hvd/<Name>
	Framework pyprobe.Framework // what Probe imports and the supported range
	DTypes    []string          // framework dtype names the module accepts
	Template  string            // text/template source of hvd/<Name>/__init__.py
}

var _ plugin.FrameworkAdapter = Templated{}

// Describe implements plugin.FrameworkAdapter.
func (a Templated) Describe(context.Context) (*plugin.Description, error) {
	return &plugin.Description{
		Framework:         a.Name,
		PluginVersion:     plugin.SDKVersion,
		ProtocolVersion:   plugin.ProtocolVersion,
		PackageVersion:    Version(),
		PythonModule:      a.Framework.Module,
		FrameworkVersions: a.Framework.Supported.String(),
		DTypes:            a.DTypes,
		Devices:           []string{"cpu"},
		GenerateKinds:     []string{plugin.KindPackage},
	}, nil
}

// Probe implements plugin.FrameworkAdapter.
func (a Templated) Probe(ctx context.Context, req plugin.ProbeRequest) (*plugin.ProbeResult, error) {
	return pyprobe.Probe(ctx, req.Python, a.Framework)
}

// Generate implements plugin.FrameworkAdapter: only the "package" kind.
func (a Templated) Generate(_ context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	if req.Kind != plugin.KindPackage {
		return nil, fmt.Errorf("%w: %s answers %q, not %q", plugin.ErrUnsupportedKind, a.Name, plugin.KindPackage, req.Kind)
	}
	set, err := Select(append(Core, NumpyCore...)...)
	if err != nil {
		return nil, err
	}
	path := "hvd/" + a.Name + "/__init__.py"
	src, err := Render(path, a.Template, map[string]any{
		"PackageVersion": Version(),
		"PluginVersion":  plugin.SDKVersion,
		"Supported":      a.Framework.Supported.String(),
		"DTypes":         a.DTypes,
	})
	if err != nil {
		return nil, err
	}
	return Merge(set, plugin.File{Path: path, Data: src, Mode: 0o644}), nil
}
