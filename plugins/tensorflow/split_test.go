package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
	"github.com/hvdorg/hvd/sdk/plugin"
)

func splitRequest(t *testing.T, s *spec.Spec) plugin.GenerateRequest {
	t.Helper()
	s.Generate = []string{spec.GenSplit}
	y, err := spec.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return plugin.GenerateRequest{Kind: plugin.KindSplit, Spec: y, Options: map[string]string{plugin.OptionSpecFile: "hvd.yaml"}}
}

// Declared layers: split through the built-in catalogue (the generated code
// is byte-compiled, never run: no TensorFlow here).
func TestSplitDeclared(t *testing.T) {
	a := adapter()
	d, _ := a.Describe(context.Background())
	if !slices.Contains(d.GenerateKinds, plugin.KindSplit) || !slices.Contains(d.GenerateKinds, plugin.KindPackage) {
		t.Fatalf("kinds %v", d.GenerateKinds)
	}
	s := spec.Default(spec.TensorFlow)
	s.Model.InputShape = []int{16} // Keras' Dense does not say its input size
	set, err := a.Generate(context.Background(), splitRequest(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Files) == 0 || !strings.Contains(set.Summary, "stage") {
		t.Fatalf("files %v, summary:\n%s", set.Paths(), set.Summary)
	}
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}

// A factory model cannot be inspected without TensorFlow: a positioned spec error
// that says to declare the layers.
func TestSplitFactoryRefused(t *testing.T) {
	s := spec.Default(spec.TensorFlow)
	s.Model = &spec.Model{Factory: "nets:build"}
	_, err := adapter().Generate(context.Background(), splitRequest(t, s))
	if !errors.Is(err, plugin.ErrInvalidRequest) || !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("not an input error: %v", err)
	}
	for _, w := range []string{"model.factory: nets:build: factory inspection needs the framework installed", "TensorFlow models cannot be inspected", "declare the layers under model.layers"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}
