package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
	"github.com/hvdorg/hvd/python"
)

func TestPackage(t *testing.T) {
	set := plugintest.Contract(t, adapter{}, "pytorch", "torch")
	// The package is python/hvd's __init__, common, runner, the engines
	// (spark, ray) and torch, byte for byte.
	want := 0
	err := fs.WalkDir(python.FS(), "hvd", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if p != "hvd/__init__.py" && !strings.HasPrefix(p, "hvd/common/") && !strings.HasPrefix(p, "hvd/runner/") && !strings.HasPrefix(p, "hvd/torch/") &&
			!strings.HasPrefix(p, "hvd/_driver/") && !strings.HasPrefix(p, "hvd/spark/") && !strings.HasPrefix(p, "hvd/ray/") {
			if _, ok := set.Lookup(p); ok {
				t.Errorf("%s should not be in the pytorch package", p)
			}
			return nil
		}
		want++
		f, ok := set.Lookup(p)
		disk, _ := os.ReadFile(filepath.Join("../../python", p))
		if !ok || string(f.Data) != string(disk) {
			t.Errorf("%s missing or different from python/%s", p, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Files) != want {
		t.Errorf("%d files, want %d", len(set.Files), want)
	}
	t.Run("Golden", func(t *testing.T) { plugintest.Golden(t, set, nil, "package") })
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}

func TestScaffoldKind(t *testing.T) {
	set, err := adapter{}.Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindScaffold, Options: map[string]string{"name": "demo"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"hvd.yaml", "train.py", "Makefile", "README.md"} {
		if _, ok := set.Lookup(p); !ok {
			t.Errorf("scaffold lacks %s: %v", p, set.Paths())
		}
	}
	if _, err := (adapter{}).Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindScaffold, Options: map[string]string{"name": "9bad"}}); err == nil {
		t.Error("bad project name accepted")
	}
}

// Probe against the real interpreter: torch importable (Debian's
// python3-torch) or a clear problem.
func TestProbeSystemPython(t *testing.T) {
	if _, err := os.Stat(plugintest.Python); err != nil {
		t.Skipf("SKIPPED: %s not present", plugintest.Python)
	}
	r, err := adapter{}.Probe(context.Background(), plugin.ProbeRequest{Python: plugintest.Python})
	if err != nil {
		t.Fatal(err)
	}
	if r.Importable {
		if !r.Supported || r.FrameworkVersion == "" || r.PythonVersion == "" {
			t.Fatalf("probe: %+v", r)
		}
	} else if !strings.Contains(r.Problem, "torch") {
		t.Fatalf("probe: %+v", r)
	}
	t.Logf("probe: %+v", r)
}
