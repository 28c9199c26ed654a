package pyprobe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/plugin/v1"
)

func TestRange(t *testing.T) {
	for _, c := range []struct {
		rng, version string
		want         bool
	}{
		{">=1.13,<3", "1.13.0a0+gitabc", true}, // Debian's torch build
		{">=1.13,<3", "1.13", true},
		{">=1.13,<3", "1.12.1", false},
		{">=1.13,<3", "3.0.0", false},
		{">=1.13,<3", "2.9.9", true},
		{">=2.6,<3", "2.15.0", true},
		{">=1.6,<2", "1.9.1", true},
		{">=1.6,<2", "2.0.0b1", false},
		{"==1.2", "1.2.0", true},
		{"!=1.2,>1", "1.2", false},
		{"<=1.2", "1.2.0.post1", true},
		{">=1", "", false},
		{">=1", "abc", false},
		{">=1", "v1.0", true},
	} {
		if got := MustRange(c.rng).Contains(c.version); got != c.want {
			t.Errorf("%q contains %q = %v, want %v", c.rng, c.version, got, c.want)
		}
	}
	for _, bad := range []string{"", "1.2", ">=", ">=x", ">=1,,<2", "~=1.2"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted", bad)
		}
	}
}

const py = "/usr/bin/python3"

func fakeModule(t *testing.T, name, src string) string {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, name), 0o755)
	if err := os.WriteFile(filepath.Join(dir, name, "__init__.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestProbe(t *testing.T) {
	if _, err := os.Stat(py); err != nil {
		t.Skipf("SKIPPED: %s not present", py)
	}
	ctx := context.Background()
	fw := Framework{Module: "hvdfakefw", GPU: "fw.gpus()", Supported: MustRange(">=1.5,<2")}

	// Noise on stdout during import does not confuse the probe.
	t.Setenv("PYTHONPATH", fakeModule(t, "hvdfakefw", "print('hello from import')\n__version__ = '1.5.0a0+git'\ndef gpus():\n    return 2\n"))
	r, err := Probe(ctx, py, fw)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Importable || !r.Supported || r.FrameworkVersion != "1.5.0a0+git" || !r.GPUAvailable || r.GPUCount != 2 || r.Problem != "" || r.PythonVersion == "" {
		t.Fatalf("probe %+v", r)
	}

	t.Setenv("PYTHONPATH", fakeModule(t, "hvdfakefw", "__version__ = '1.4.9'\ndef gpus():\n    raise RuntimeError('no driver')\n"))
	r, err = Probe(ctx, py, fw)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Importable || r.Supported || r.GPUAvailable || !strings.Contains(r.Problem, "1.4.9") || !strings.Contains(r.Problem, ">=1.5,<2") {
		t.Fatalf("old version: %+v", r)
	}
	if err := r.Err(&plugin.Description{PythonModule: "hvdfakefw", FrameworkVersions: ">=1.5,<2"}); !errors.Is(err, plugin.ErrUnsupportedVersion) {
		t.Fatalf("Err: %v", err)
	}

	t.Setenv("PYTHONPATH", fakeModule(t, "hvdfakefw", "raise ImportError('libcudart.so.12: cannot open shared object file')\n"))
	r, err = Probe(ctx, py, fw)
	if err != nil {
		t.Fatal(err)
	}
	if r.Importable || !strings.Contains(r.Problem, "libcudart.so.12") {
		t.Fatalf("broken import: %+v", r)
	}

	r, err = Probe(ctx, py, Framework{Module: "hvd_no_such_module_xyz", GPU: "0", Supported: MustRange(">=1")})
	if err != nil || r.Importable || !strings.Contains(r.Problem, "No module named 'hvd_no_such_module_xyz'") {
		t.Fatalf("missing module: %+v %v", r, err)
	}

	if _, err := Probe(ctx, "/nonexistent/python3", fw); !errors.Is(err, ErrInterpreter) {
		t.Fatalf("missing interpreter: %v", err)
	}
	if _, err := Probe(ctx, "", fw); !errors.Is(err, plugin.ErrInvalidRequest) {
		t.Fatalf("empty interpreter: %v", err)
	}
	// An "interpreter" that runs but never answers.
	fake := filepath.Join(t.TempDir(), "python")
	os.WriteFile(fake, []byte("#!/bin/sh\necho not python\n"), 0o755)
	if _, err := Probe(ctx, fake, fw); !errors.Is(err, ErrInterpreter) {
		t.Fatalf("silent interpreter: %v", err)
	}
}
