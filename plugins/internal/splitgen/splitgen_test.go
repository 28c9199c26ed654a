package splitgen

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/codegen/split"
	"github.com/hvdorg/hvd/plugin/v1"
)

type base struct{}

func (base) Describe(context.Context) (*plugin.Description, error) {
	return &plugin.Description{Framework: "mxnet", GenerateKinds: []string{plugin.KindPackage}}, nil
}
func (base) Probe(context.Context, plugin.ProbeRequest) (*plugin.ProbeResult, error) { return nil, nil }
func (base) Generate(_ context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	if req.Kind != plugin.KindPackage {
		return nil, plugin.ErrUnsupportedKind
	}
	return (&plugin.FileSet{}).Add("hvd/__init__.py", nil), nil
}

func request(t *testing.T, s *spec.Spec) plugin.GenerateRequest {
	t.Helper()
	s.Generate = []string{spec.GenSplit}
	y, err := spec.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return plugin.GenerateRequest{Kind: plugin.KindSplit, Spec: y, Options: map[string]string{plugin.OptionSpecFile: "conf/hvd.yaml"}}
}

func TestWithSplit(t *testing.T) {
	ctx := context.Background()
	a := WithSplit(base{}, spec.MXNet, nil, "MXNet cannot be run here")
	d, _ := a.Describe(ctx)
	if !slices.Equal(d.GenerateKinds, []string{plugin.KindPackage, plugin.KindSplit}) {
		t.Fatalf("kinds %v", d.GenerateKinds)
	}
	if set, err := a.Generate(ctx, plugin.GenerateRequest{Kind: plugin.KindPackage}); err != nil || len(set.Files) != 1 {
		t.Fatalf("package kind not passed through: %v", err)
	}
	_, err := a.Generate(ctx, plugin.GenerateRequest{Kind: "x"})
	if !errors.Is(err, plugin.ErrUnsupportedKind) || !strings.Contains(err.Error(), `mxnet answers "package", "split", not "x"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	set, err := a.Generate(ctx, request(t, spec.Default(spec.MXNet)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(set.Summary, "3 declared layers; cost = estimated FLOPs") || !strings.Contains(set.Summary, "process sets") {
		t.Fatalf("summary:\n%s", set.Summary)
	}
	s := spec.Default(spec.MXNet)
	s.Model = &spec.Model{Factory: "m:f"}
	_, err = a.Generate(ctx, request(t, s))
	var se *spec.Error
	if !errors.Is(err, plugin.ErrInvalidRequest) || !errors.As(err, &se) || se.Path != "model.factory" || se.File != "conf/hvd.yaml" ||
		!strings.Contains(err.Error(), "MXNet cannot be run here — declare the layers") {
		t.Fatalf("factory: %v", err)
	}
	// An unknown layer type is the catalogue's positioned error, passed on
	// as an input error.
	s = spec.Default(spec.MXNet)
	s.Model.Layers[1].Type = "Frobnicate"
	_, err = a.Generate(ctx, request(t, s))
	if !errors.Is(err, plugin.ErrInvalidRequest) || !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "model.layers[1]") {
		t.Fatalf("unknown layer: %v", err)
	}
}

func TestFileSetModes(t *testing.T) {
	set, err := FileSet(&split.Result{Files: map[string][]byte{"b.py": []byte("x = 1\n"), "a.sh": []byte("#!/bin/sh\n")}, Table: "t\n"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.Paths(), []string{"a.sh", "b.py"}) || set.Files[0].Mode != 0o755 || set.Files[1].Mode != 0o644 || set.Summary != "t\n" {
		t.Fatalf("%+v", set)
	}
}
