package pypkg

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

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
	// Templates, when set, replaces Template: every NAME.tmpl in it is
	// rendered to hvd/NAME (e.g. tensorflow/keras/callbacks.py.tmpl to
	// hvd/tensorflow/keras/callbacks.py), so one plugin can emit several
	// modules (hvd.tensorflow, hvd.tensorflow.keras, hvd.keras).
	Templates fs.FS
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
	data := map[string]any{
		"PackageVersion": Version(),
		"PluginVersion":  plugin.SDKVersion,
		"Supported":      a.Framework.Supported.String(),
		"DTypes":         a.DTypes,
	}
	sources := map[string]string{}
	if a.Templates == nil {
		sources["hvd/"+a.Name+"/__init__.py"] = a.Template
	} else {
		err := fs.WalkDir(a.Templates, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".tmpl") {
				return err
			}
			b, err := fs.ReadFile(a.Templates, p)
			sources[path.Join("hvd", strings.TrimSuffix(p, ".tmpl"))] = string(b)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("pypkg: %s templates: %w", a.Name, err)
		}
	}
	paths := make([]string, 0, len(sources))
	for p := range sources {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var files []plugin.File
	for _, p := range paths {
		src, err := Render(p, sources[p], data)
		if err != nil {
			return nil, err
		}
		files = append(files, plugin.File{Path: p, Data: src, Mode: 0o644})
	}
	return Merge(set, files...), nil
}
