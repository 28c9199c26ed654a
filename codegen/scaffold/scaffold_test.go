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
	"pytorch":    {Framework: "pytorch", Name: "demo"},
	"go":         {Framework: "go", Name: "demo-go", HvdReplace: "/src/hvd"},
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
			if _, err := os.Stat("/usr/bin/python3"); err != nil {
				t.Logf("NOT CHECKED: no /usr/bin/python3 to byte-compile train.py")
				continue
			}
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "train.py"), src, 0o644)
			if out, err := exec.Command("/usr/bin/python3", "-m", "py_compile", filepath.Join(dir, "train.py")).CombinedOutput(); err != nil {
				t.Errorf("train.py: %v %s", err, out)
			}
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
	files, err := Generate(Options{Framework: "go"})
	if err != nil || !strings.Contains(string(files["go.mod"]), "module myproject") || strings.Contains(string(files["go.mod"]), "replace") {
		t.Fatalf("defaults: %v\n%s", err, files["go.mod"])
	}
}
