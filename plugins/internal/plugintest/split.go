package plugintest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
)

// SplitRequest is a Generate request of kind split for s (its generate
// list set to split).
func SplitRequest(t *testing.T, s *spec.Spec) plugin.GenerateRequest {
	t.Helper()
	s.Generate = []string{spec.GenSplit}
	y, err := spec.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return plugin.GenerateRequest{Kind: plugin.KindSplit, Spec: y, Options: map[string]string{plugin.OptionSpecFile: "hvd.yaml"}}
}

// SplitWithoutInspection checks a plugin that splits declared layers but
// cannot inspect a factory model (TensorFlow, MXNet): it answers both
// kinds; the default spec's declared layers give byte-compiling files and
// a summary; a factory model is a positioned spec error that names the
// framework (title, e.g. "TensorFlow") and says to declare the layers.
func SplitWithoutInspection(t *testing.T, a plugin.FrameworkAdapter, fw spec.Framework, title string) {
	t.Run("Declared", func(t *testing.T) {
		d, _ := a.Describe(context.Background())
		if !slices.Contains(d.GenerateKinds, plugin.KindSplit) || !slices.Contains(d.GenerateKinds, plugin.KindPackage) {
			t.Fatalf("kinds %v", d.GenerateKinds)
		}
		set, err := a.Generate(context.Background(), SplitRequest(t, spec.Default(fw)))
		if err != nil {
			t.Fatal(err)
		}
		if len(set.Files) == 0 || !strings.Contains(set.Summary, "stage") {
			t.Fatalf("files %v, summary:\n%s", set.Paths(), set.Summary)
		}
		t.Run("PyCompile", func(t *testing.T) { PyCompile(t, set) })
	})
	t.Run("FactoryRefused", func(t *testing.T) {
		s := spec.Default(fw)
		s.Model = &spec.Model{Factory: "nets:build"}
		_, err := a.Generate(context.Background(), SplitRequest(t, s))
		if !errors.Is(err, plugin.ErrInvalidRequest) || !errors.Is(err, spec.ErrInvalid) {
			t.Fatalf("not an input error: %v", err)
		}
		for _, w := range []string{"model.factory: nets:build: factory inspection needs the framework installed", title + " models cannot be inspected", "declare the layers under model.layers"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q:\n%v", w, err)
			}
		}
	})
}
