package scaffold

import (
	"bytes"
	"flag"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/hvdorg/hvd/codegen/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txtar")

var cases = map[string]Options{
	"pytorch":    {Framework: "pytorch", Name: "demo", Hvdrun: "/opt/hvd/bin/hvdrun"},
	"go":         {Framework: "go", Name: "demo-go", HvdReplace: "/src/hvd", Hvdrun: "/opt/hvd/bin/hvdrun", GoSum: []byte("example.com/dep v1.0.0 h1:AAAA=\n")},
	"tensorflow": {Framework: "tensorflow", Name: "demo-tf"},
	"mxnet":      {Framework: "mxnet", Name: "demo-mx"},
}

// Golden files: every file of each scaffold (testdata/<case>.txtar).
func TestGolden(t *testing.T) {
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			files, err := Generate(o)
			if err != nil {
				t.Fatal(err)
			}
			ar := &txtar.Archive{Comment: []byte("hvdgen init scaffold; rewrite with go test -update\n")}
			for _, p := range Paths(files) {
				ar.Files = append(ar.Files, txtar.File{Name: p, Data: files[p]})
			}
			got := txtar.Format(ar)
			path := filepath.Join("testdata", name+".txtar")
			if *update {
				os.MkdirAll("testdata", 0o755)
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -update creates it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale (go test -update if intended)", path)
			}
			again, _ := Generate(o)
			if !reflect.DeepEqual(files, again) {
				t.Error("not deterministic")
			}
		})
	}
}

// The generated files are valid: hvd.yaml parses, main.go parses, train.py
// byte-compiles. (cmd/hvdgen's tests run both projects under hvdrun.)
func TestGeneratedFilesAreValid(t *testing.T) {
	for name, o := range cases {
		files, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		s, err := spec.Parse("hvd.yaml", files["hvd.yaml"])
		if err != nil {
			t.Fatalf("%s: hvd.yaml: %v", name, err)
		}
		if s.Project != o.Name || string(s.Framework) != o.Framework {
			t.Errorf("%s: hvd.yaml project %q framework %q", name, s.Project, s.Framework)
		}
		if src, ok := files["main.go"]; ok {
			if _, err := parser.ParseFile(token.NewFileSet(), "main.go", src, 0); err != nil {
				t.Errorf("%s: main.go: %v", name, err)
			}
			if !strings.Contains(string(files["go.mod"]), `replace github.com/hvdorg/hvd => "/src/hvd"`) {
				t.Errorf("go.mod:\n%s", files["go.mod"])
			}
		}
		if src, ok := files["train.py"]; ok {
			py := testPython(t)
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "train.py"), src, 0o644)
			if out, err := exec.Command(py, "-m", "py_compile", filepath.Join(dir, "train.py")).CombinedOutput(); err != nil {
				t.Errorf("%s: train.py does not byte-compile: %v %s", name, err, out)
			}
		}
	}
}

// testPython returns an interpreter to check the generated Python with:
// /usr/bin/python3, else python3 on PATH. Without one the test is skipped,
// visibly (it used to pass, having only logged that it checked nothing).
func testPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("SKIPPED, NOT CHECKED: no python3 to byte-compile the generated train.py")
	return ""
}

// The Python Makefile finds hvdrun where hvdgen plugin install puts it: in
// DIR/bin of a PYTHONPATH entry (--target DIR), in the bin/ of $(PYTHON)'s
// environment, on PATH, then next to hvdgen; and says what to do when there
// is none. The Go Makefile: PATH, then next to hvdgen.
func TestMakefileFindsHvdrun(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("SKIPPED, NOT CHECKED: make is not installed")
	}
	root := t.TempDir()
	mk := func(dir string) string {
		p := filepath.Join(root, dir)
		os.MkdirAll(p, 0o755)
		os.WriteFile(filepath.Join(p, "hvdrun"), []byte("#!/bin/sh\n"), 0o755)
		return p
	}
	target, venvBin, onPath, nextTo := mk("target/bin"), mk("venv/bin"), mk("path"), mk("hvdgen")
	// A stand-in interpreter: answers the sysconfig question with venv/bin.
	fakePy := filepath.Join(root, "fakepython")
	os.WriteFile(fakePy, []byte("#!/bin/sh\necho "+venvBin+"\n"), 0o755)
	emptyPy := filepath.Join(root, "emptypython") // its environment has no hvdrun
	os.WriteFile(emptyPy, []byte("#!/bin/sh\necho "+root+"\n"), 0o755)
	noHvdrunPath := "/usr/bin:/bin"

	for _, fw := range []string{"pytorch", "go"} {
		files, err := Generate(Options{Framework: fw, Name: "p", Hvdrun: filepath.Join(nextTo, "hvdrun")})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "Makefile"), files["Makefile"], 0o644)
		type tc struct {
			env  []string
			want string
		}
		cases := []tc{
			{[]string{"PATH=" + onPath + ":" + noHvdrunPath}, filepath.Join(onPath, "hvdrun")},
			{[]string{"PATH=" + noHvdrunPath}, filepath.Join(nextTo, "hvdrun")},
		}
		if fw == "pytorch" {
			cases = append(cases,
				tc{[]string{"PATH=" + onPath + ":" + noHvdrunPath, "PYTHONPATH=/nonexistent:" + filepath.Dir(target), "PYTHON=" + fakePy}, filepath.Join(target, "hvdrun")},
				tc{[]string{"PATH=" + onPath + ":" + noHvdrunPath, "PYTHON=" + fakePy}, filepath.Join(venvBin, "hvdrun")})
		}
		for _, c := range cases {
			cmd := exec.Command("make", "-s", "-f", filepath.Join(dir, "Makefile"), "--eval=print-hvdrun: ; @echo $(HVDRUN)", "print-hvdrun")
			cmd.Env = append(os.Environ(), c.env...)
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != c.want {
				t.Errorf("%s with %v: HVDRUN = %q (%v), want %s", fw, c.env, out, err, c.want)
			}
		}
		// None anywhere: make run stops with what to do.
		files, _ = Generate(Options{Framework: fw, Name: "p"})
		os.WriteFile(filepath.Join(dir, "Makefile"), files["Makefile"], 0o644)
		cmd := exec.Command("make", "-s", "-C", dir, "run")
		cmd.Env = append(os.Environ(), "PATH="+noHvdrunPath, "PYTHON="+emptyPy, "PYTHONPATH=", "GO=true")
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "hvdrun not found") || !strings.Contains(string(out), "HVDRUN=/path/to/hvdrun") {
			t.Errorf("%s without hvdrun: %s", fw, out)
		}
	}
}

func TestOptions(t *testing.T) {
	for _, bad := range []Options{
		{Framework: "cobol"}, {Framework: "go", Name: "9x"}, {Framework: "go", Name: "a b"},
		{Framework: "go", Name: strings.Repeat("a", 101)}, {Framework: "go", HvdReplace: "a\"b"},
	} {
		if _, err := Generate(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	for _, bad := range []Options{
		{Framework: "pytorch", Hvdrun: "relative/hvdrun"}, {Framework: "pytorch", Hvdrun: "/a b/hvdrun"},
		{Framework: "go", Hvdrun: "/$(x)/hvdrun"}, {Framework: "pytorch", GoSum: []byte("x")}, {Framework: "go", GoSum: []byte("x")},
	} {
		if _, err := Generate(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	files, err := Generate(Options{Framework: "go"})
	if err != nil || !strings.Contains(string(files["go.mod"]), "module myproject") || strings.Contains(string(files["go.mod"]), "replace") {
		t.Fatalf("defaults: %v\n%s", err, files["go.mod"])
	}
}
