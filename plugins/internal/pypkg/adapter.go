package pypkg

import (
	"context"
	"fmt"

	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
)

// Adapter is a framework adapter whose package is hvd.common, hvd.numpy
// and the framework's own modules, real sources in package python (e.g.
// python/hvd/tensorflow): the shape of the TensorFlow and MXNet plugins,
// which run on the numpy-level core. Only what varies is rendered:
// hvd/<Name>/_plugin.py, the plugin's and package's versions, the supported
// framework range and the dtypes the plugin describes (DTYPES), which the
// sources import.
type Adapter struct {
	Name      string            // framework name, also the module's directory: hvd/<Name>
	Framework pyprobe.Framework // what Probe imports and the supported range
	DTypes    []string          // framework dtype names the module accepts
	// Modules are the embedded sources the package carries besides the core
	// (a file or a directory taken whole): "hvd/tensorflow", "hvd/keras".
	Modules []string
}

// pluginModule is hvd/<Name>/_plugin.py, the one rendered module.
const pluginModule = `"""What hvd-plugin-{{.Name}} {{.PluginVersion}} describes, written with
the package (hvd {{.PackageVersion}}) by ` + "`hvdgen plugin install {{.Name}}`" + `; the
sources of hvd.{{.Name}} are python/hvd/{{.Name}} in hvd's repository."""
PLUGIN_VERSION = '{{.PluginVersion}}'
PACKAGE_VERSION = '{{.PackageVersion}}'
SUPPORTED = '{{.Supported}}'  # the framework versions it supports
DTYPES = (  # the framework's dtype names it accepts
{{- range .DTypes}}
    '{{.}}',
{{- end}}
)
`

var _ plugin.FrameworkAdapter = Adapter{}

// Describe implements plugin.FrameworkAdapter.
func (a Adapter) Describe(context.Context) (*plugin.Description, error) {
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
func (a Adapter) Probe(ctx context.Context, req plugin.ProbeRequest) (*plugin.ProbeResult, error) {
	return pyprobe.Probe(ctx, req.Python, a.Framework)
}

// Generate implements plugin.FrameworkAdapter: only the "package" kind.
func (a Adapter) Generate(_ context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	if req.Kind != plugin.KindPackage {
		return nil, fmt.Errorf("%w: %s answers %q, not %q", plugin.ErrUnsupportedKind, a.Name, plugin.KindPackage, req.Kind)
	}
	paths := append(append(append([]string{}, Core...), NumpyCore...), a.Modules...)
	set, err := Select(paths...)
	if err != nil {
		return nil, err
	}
	p := "hvd/" + a.Name + "/_plugin.py"
	src, err := Render(p, pluginModule, map[string]any{
		"Name":           a.Name,
		"PackageVersion": Version(),
		"PluginVersion":  plugin.SDKVersion,
		"Supported":      a.Framework.Supported.String(),
		"DTypes":         a.DTypes,
	})
	if err != nil {
		return nil, err
	}
	return Merge(set, plugin.File{Path: p, Data: src, Mode: 0o644}), nil
}
