package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
)

func TestInitWritesAProject(t *testing.T) {
	for _, fw := range []string{"pytorch", "go", "tensorflow", "mxnet"} {
		t.Run(fw, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "demo-"+fw)
			out, errOut, code := run(t, "init", "--framework", fw, dir)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			want := map[string][]string{
				"pytorch":    {".gitignore", "Makefile", "README.md", "hvd.yaml", "train.py"},
				"go":         {".gitignore", "Makefile", "README.md", "go.mod", "hvd.yaml", "main.go"},
				"tensorflow": {".gitignore", "Makefile", "README.md", "hvd.yaml", "train.py"},
				"mxnet":      {".gitignore", "Makefile", "README.md", "hvd.yaml", "train.py"},
			}[fw]
			for _, f := range want {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("%s missing: %v", f, err)
				}
			}
			y, _ := os.ReadFile(filepath.Join(dir, "hvd.yaml"))
			s, err := spec.Parse("hvd.yaml", y)
			if err != nil {
				t.Fatalf("hvd.yaml does not parse: %v\n%s", err, y)
			}
			if s.Project != "demo-"+fw || string(s.Framework) != fw {
				t.Errorf("hvd.yaml: project %q framework %q", s.Project, s.Framework)
			}
			mk, _ := os.ReadFile(filepath.Join(dir, "Makefile"))
			if !strings.Contains(string(mk), "-np $(NP)") || !strings.Contains(string(mk), "NP     ?= 2") {
				t.Errorf("Makefile has no hvdrun -np 2 run target:\n%s", mk)
			}
			// Running again refuses to overwrite; --force overwrites.
			if _, errOut, code := run(t, "init", "--framework", fw, dir); code != 1 || !strings.Contains(errOut, "--force") {
				t.Errorf("second init: exit %d %s", code, errOut)
			}
			if _, errOut, code := run(t, "init", "--force", "--framework", fw, dir); code != 0 {
				t.Errorf("init --force: exit %d %s", code, errOut)
			}
		})
	}
}

func TestInitDryRunAndNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p")
	out, _, code := run(t, "init", "--dry-run", "--name", "alpha", dir)
	if code != 0 || !strings.Contains(out, `would create a pytorch project "alpha"`) || !strings.Contains(out, "train.py") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("dry run created the directory")
	}
	if _, errOut, code := run(t, "init", "--name", "9lives", dir); code != 2 || !strings.Contains(errOut, "starting with a letter") {
		t.Fatalf("bad name: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, "init", "--framework", "go", "--hvd-replace", t.TempDir(), dir); code != 2 || !strings.Contains(errOut, "go.mod") {
		t.Fatalf("replace without go.mod: exit %d %s", code, errOut)
	}
	repo, _ := filepath.Abs("../..")
	if _, errOut, code := run(t, "init", "--framework", "go", "--hvd-replace", "../..", dir); code != 0 {
		t.Fatalf("go with replace: %d %s", code, errOut)
	}
	mod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(mod), `replace github.com/hvdorg/hvd => "`+repo+`"`) {
		t.Fatalf("go.mod:\n%s", mod)
	}
}

// Without --hvd-replace a Go project points at the source hvdgen was built
// from and starts with its go.sum; when that source is unknown, init warns.
func TestInitGoReplacesWithOwnSource(t *testing.T) {
	repo, _ := filepath.Abs("../..")
	dir := filepath.Join(t.TempDir(), "g")
	out, errOut, code := run(t, "init", "--framework", "go", dir)
	if code != 0 || !strings.Contains(out, "go.mod: replace github.com/hvdorg/hvd => "+repo) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	mod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(mod), `replace github.com/hvdorg/hvd => "`+repo+`"`) {
		t.Fatalf("go.mod:\n%s", mod)
	}
	sum, _ := os.ReadFile(filepath.Join(dir, "go.sum"))
	want, _ := os.ReadFile(filepath.Join(repo, "go.sum"))
	if len(sum) == 0 || string(sum) != string(want) {
		t.Fatalf("go.sum is not the source's (%d bytes, want %d)", len(sum), len(want))
	}

	saved := hvdSourceDir
	defer func() { hvdSourceDir = saved }()
	hvdSourceDir = t.TempDir() // not the hvd module
	dir = filepath.Join(t.TempDir(), "g2")
	out, _, code = run(t, "init", "--framework", "go", dir)
	if code != 0 || !strings.Contains(out, "warning: go.mod requires github.com/hvdorg/hvd, which no module proxy serves") {
		t.Fatalf("unknown source: exit %d\n%s", code, out)
	}
	if mod, _ := os.ReadFile(filepath.Join(dir, "go.mod")); strings.Contains(string(mod), "replace") {
		t.Fatalf("go.mod has a replace:\n%s", mod)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.sum")); err == nil {
		t.Fatal("go.sum written without a source")
	}
}
