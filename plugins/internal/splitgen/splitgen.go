// Package splitgen answers a framework plugin's Generate kind "split": it
// reads the request's spec and options, gets the model's layers — declared
// ones from split.Catalogue, a factory model from the plugin's Inspector —
// and renders the project with split.Generate. The PyTorch, TensorFlow and
// MXNet plugins share it; only PyTorch has an Inspector.
package splitgen

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hvdorg/hvd/codegen/partition"
	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/codegen/split"
	"github.com/hvdorg/hvd/plugin/v1"
)

// Request is a decoded split request.
type Request struct {
	Spec *spec.Spec
	// Python is the interpreter a factory model is inspected with
	// (plugin.OptionPython; default python3).
	Python string
	// Dir is the spec's directory (plugin.OptionSpecDir): a factory's
	// module is imported from there. "" when the host did not say.
	Dir string
	// ImportRoot is Dir relative to where the generated files go
	// (plugin.OptionImportRoot), for the generated code's imports.
	ImportRoot string
}

// Inspector imports a factory model (r.Spec.Model.Factory) and describes
// its layers; note is a line for the summary saying how the layers were
// measured (where, in which cost unit). Errors about the user's model are
// Invalid ones.
type Inspector func(ctx context.Context, r *Request) (m *split.Model, note string, err error)

// Decode reads a split request for the plugin of framework fw.
func Decode(req plugin.GenerateRequest, fw spec.Framework) (*Request, error) {
	name := req.Options[plugin.OptionSpecFile]
	if name == "" {
		name = "hvd.yaml"
	}
	if len(req.Spec) == 0 {
		return nil, fmt.Errorf("%w: split needs the spec (hvd.yaml) in the request", plugin.ErrInvalidRequest)
	}
	s, err := spec.Parse(name, req.Spec)
	if err != nil {
		return nil, Invalid(err)
	}
	if s.Framework != fw {
		return nil, Invalid(s.ErrorAt("framework", "the spec is for %s, but this is the %s plugin (hvd-plugin-%s)", s.Framework, fw, fw))
	}
	if s.Model == nil || s.Parallel == nil {
		return nil, Invalid(s.ErrorAt("", "split needs the model and parallel sections"))
	}
	r := &Request{Spec: s, Python: req.Options[plugin.OptionPython], Dir: req.Options[plugin.OptionSpecDir],
		ImportRoot: req.Options[plugin.OptionImportRoot]}
	if path.IsAbs(r.ImportRoot) || strings.Contains(r.ImportRoot, "\\") {
		return nil, fmt.Errorf("%w: option %s must be a relative slash-separated path, got %q", plugin.ErrInvalidRequest, plugin.OptionImportRoot, r.ImportRoot)
	}
	if r.Python == "" {
		r.Python = "python3"
	}
	if r.Dir != "" && !filepath.IsAbs(r.Dir) {
		return nil, fmt.Errorf("%w: option %s must be an absolute directory, got %q", plugin.ErrInvalidRequest, plugin.OptionSpecDir, r.Dir)
	}
	return r, nil
}

// Generate answers a split request: declared layers through
// split.Catalogue, a factory model through inspect (nil: the plugin cannot
// inspect, and refused says why, e.g. "TensorFlow cannot be inspected by
// this plugin").
func Generate(ctx context.Context, req plugin.GenerateRequest, fw spec.Framework, inspect Inspector, refused string) (*plugin.FileSet, error) {
	r, err := Decode(req, fw)
	if err != nil {
		return nil, err
	}
	var (
		m    *split.Model
		note string
	)
	if g := r.Spec.Model.GPT; g != nil {
		res, err := split.GenerateGPT(r.Spec, r.ImportRoot)
		if err != nil {
			return nil, classify(err)
		}
		set, err := FileSet(res)
		if err != nil {
			return nil, err
		}
		set.Summary = fmt.Sprintf("GPT: %d blocks, hidden %d, %d heads, vocabulary %d, sequence %d; cut into chunks balancing FLOPs and memory", g.Blocks, g.Hidden, g.Heads, g.Vocab, g.SeqLen) + "\n\n" + set.Summary
		return set, nil
	}
	if f := r.Spec.Model.Factory; f != "" {
		if inspect == nil {
			return nil, Invalid(r.Spec.ErrorAt("model.factory", "%s: factory inspection needs the framework installed; %s — declare the layers under model.layers instead", f, refused))
		}
		m, note, err = inspect(ctx, r)
		if err == nil {
			m.ImportRoot = r.ImportRoot
		}
	} else {
		m, err = split.Catalogue(r.Spec)
		err = classify(err)
		if err == nil {
			m.ImportRoot = r.ImportRoot // where train.data and train.loss are imported from
		}
		note = fmt.Sprintf("%d declared layers; cost = estimated FLOPs per sample unless the spec gives cost hints", len(r.Spec.Model.Layers))
	}
	if err != nil {
		return nil, err
	}
	res, err := split.Generate(r.Spec, m)
	if err != nil {
		return nil, classify(err)
	}
	set, err := FileSet(res)
	if err != nil {
		return nil, err
	}
	set.Summary = note + "\n\n" + set.Summary
	return set, nil
}

// FileSet turns a split result into the files and summary a plugin
// returns: files sorted by path, scripts starting with #! executable, the
// partition table and the topology table as the summary.
func FileSet(res *split.Result) (*plugin.FileSet, error) {
	set := &plugin.FileSet{}
	paths := make([]string, 0, len(res.Files))
	for p := range res.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		data := res.Files[p]
		mode := plugin.File{Path: p, Data: data, Mode: 0o644}
		if strings.HasPrefix(string(data), "#!") {
			mode.Mode = 0o755
		}
		set.Files = append(set.Files, mode)
	}
	set.Summary = summary(res)
	return set, set.Validate()
}

// inputError is an error in the user's input (spec, model): over the RPC it
// travels as ErrInvalidRequest (gRPC InvalidArgument) with its message
// unchanged, and the host reports it like a spec error.
type inputError struct{ err error }

func (e *inputError) Error() string   { return e.err.Error() }
func (e *inputError) Unwrap() []error { return []error{e.err, plugin.ErrInvalidRequest} }

// Invalid marks err as a problem with the user's spec or model.
func Invalid(err error) error {
	if err == nil {
		return nil
	}
	return &inputError{err}
}

// classify marks the generator's errors about its input (spec errors,
// which is how split reports them, and partition errors) as Invalid; the
// others (a bug in a template) stay internal errors.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, spec.ErrInvalid) || errors.Is(err, partition.ErrInvalid) {
		return Invalid(err)
	}
	return err
}

// WithSplit adds the split kind to a framework adapter that does not
// answer it: Describe lists it, Generate answers it with Generate (fw,
// inspect, refused as there) and passes every other kind to base.
func WithSplit(base plugin.FrameworkAdapter, fw spec.Framework, inspect Inspector, refused string) plugin.FrameworkAdapter {
	return withSplit{base, fw, inspect, refused}
}

type withSplit struct {
	plugin.FrameworkAdapter
	fw      spec.Framework
	inspect Inspector
	refused string
}

func (a withSplit) Describe(ctx context.Context) (*plugin.Description, error) {
	d, err := a.FrameworkAdapter.Describe(ctx)
	if err != nil {
		return nil, err
	}
	c := *d
	c.GenerateKinds = append(append([]string(nil), d.GenerateKinds...), plugin.KindSplit)
	return &c, nil
}

func (a withSplit) Generate(ctx context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	if req.Kind == plugin.KindSplit {
		return Generate(ctx, req, a.fw, a.inspect, a.refused)
	}
	set, err := a.FrameworkAdapter.Generate(ctx, req)
	if errors.Is(err, plugin.ErrUnsupportedKind) {
		return nil, fmt.Errorf("%w: %s answers %s, not %q", plugin.ErrUnsupportedKind, a.fw, strings.Join(quoted(a.kinds(ctx)), ", "), req.Kind)
	}
	return set, err
}

func (a withSplit) kinds(ctx context.Context) []string {
	d, err := a.Describe(ctx)
	if err != nil {
		return []string{plugin.KindSplit}
	}
	return d.GenerateKinds
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// summary is what hvdgen prints after writing the files: the partition
// explanation and the topology table.
func summary(res *split.Result) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(res.Table, "\n"))
	b.WriteString("\n")
	if res.Memory != "" {
		b.WriteString("\nMemory per stage (per rank):\n\n")
		b.WriteString(strings.TrimRight(res.Memory, "\n"))
		b.WriteString("\n")
	}
	if res.Topology != nil {
		b.WriteString("\n")
		b.WriteString(strings.TrimRight(res.Topology.Table(), "\n"))
		b.WriteString("\n")
	} else if res.Sets != "" {
		b.WriteString("\nProcess sets (registered in this order on every rank):\n\n")
		b.WriteString(strings.TrimRight(res.Sets, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}
