package abi

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the want/ sections of testdata/*.txtar")

// Golden tests: each testdata/<case>.txtar holds spec.json and the expected
// generated files under want/.
func TestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/*.txtar")
	if len(cases) == 0 {
		t.Fatal("no testdata/*.txtar")
	}
	for _, path := range cases {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var spec Spec
			var wants []txtar.File
			for _, f := range ar.Files {
				switch {
				case f.Name == "spec.json":
					if err := json.Unmarshal(f.Data, &spec); err != nil {
						t.Fatalf("spec.json: %v", err)
					}
				case strings.HasPrefix(f.Name, "want/"):
					wants = append(wants, f)
				}
			}
			got, err := Generate(&spec)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := Generate(&spec)
			for p := range got {
				if !bytes.Equal(got[p], again[p]) {
					t.Fatalf("%s: generation is not deterministic", p)
				}
			}
			if *update {
				ar.Files = ar.Files[:0:0]
				spec, _ := json.MarshalIndent(spec, "", "  ")
				ar.Files = append(ar.Files, txtar.File{Name: "spec.json", Data: append(spec, '\n')})
				for _, p := range sortedKeys(got) {
					ar.Files = append(ar.Files, txtar.File{Name: "want/" + p, Data: got[p]})
				}
				if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if len(wants) != len(got) {
				t.Fatalf("%d want/ files, generated %d (run go test -update)", len(wants), len(got))
			}
			for _, w := range wants {
				p := strings.TrimPrefix(w.Name, "want/")
				if !bytes.Equal(got[p], w.Data) {
					t.Errorf("%s differs from %s (run go test ./codegen/abi -update):\n%s", p, path, firstDiff(string(w.Data), string(got[p])))
				}
			}
		})
	}
}

// The committed generated files must be what the spec generates now.
func TestCommittedFilesFresh(t *testing.T) {
	got, err := Generate(&HVD)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sortedKeys(got) {
		have, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatalf("%s: %v (run make generate)", p, err)
		}
		if !bytes.Equal(have, got[p]) {
			t.Errorf("%s is stale: run `make generate`\n%s", p, firstDiff(string(have), string(got[p])))
		}
	}
}

// The generated code parses as Go and compiles as Python; every function
// carries the header and an //export line.
func TestGeneratedCodeIsValid(t *testing.T) {
	got, err := Generate(&HVD)
	if err != nil {
		t.Fatal(err)
	}
	src := got[GoPath]
	if !bytes.HasPrefix(src, []byte("// "+Header+"\n")) || !bytes.HasPrefix(got[PyPath], []byte("# "+Header+"\n")) {
		t.Fatal("missing the generated-code header")
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "abi_gen.go", src, parser.ParseComments); err != nil {
		t.Fatal(err)
	}
	for _, f := range HVD.Funcs {
		if !bytes.Contains(src, []byte("//export hvd_"+f.Name+"\nfunc hvd_"+f.Name+"(")) {
			t.Errorf("no export for hvd_%s", f.Name)
		}
		if !bytes.Contains(got[PyPath], []byte("\ndef "+f.Name+"(")) {
			t.Errorf("no Python wrapper for %s", f.Name)
		}
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to compile the generated Python")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "_abi.py")
	if err := os.WriteFile(file, got[PyPath], 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, "-m", "py_compile", file).CombinedOutput(); err != nil {
		t.Fatalf("generated Python does not compile: %v\n%s", err, out)
	}
}

func TestValidateRejects(t *testing.T) {
	ok := func() Spec {
		return Spec{Version: 1, Prefix: "x_", GoPackage: "p", Funcs: []Func{{Name: "f", Returns: Int32, Errors: true, Phase: PhaseCall,
			Args: []Arg{{Name: "a", Kind: Int32}, {Name: "out", Kind: OutInt32s}}}}}
	}
	s := ok()
	if err := s.Validate(); err != nil {
		t.Fatalf("valid spec rejected: %v", err)
	}
	for name, mutate := range map[string]func(*Spec){
		"version":          func(s *Spec) { s.Version = 0 },
		"reserved arg":     func(s *Spec) { s.Funcs[0].Args[0].Name = "in" },
		"unknown kind":     func(s *Spec) { s.Funcs[0].Args[0].Kind = "float128" },
		"out not last":     func(s *Spec) { s.Funcs[0].Args[0], s.Funcs[0].Args[1] = s.Funcs[0].Args[1], s.Funcs[0].Args[0] },
		"phase w/o errors": func(s *Spec) { s.Funcs[0].Errors = false },
		"bad return":       func(s *Spec) { s.Funcs[0].Returns = Float64 },
		"duplicate func":   func(s *Spec) { s.Funcs = append(s.Funcs, s.Funcs[0]) },
		"duplicate code": func(s *Spec) {
			s.Errors = []ErrorCode{{Name: "A", Code: 1, Python: "ValueError"}, {Name: "B", Code: 1, Python: "ValueError"}}
		},
		"unknown exception": func(s *Spec) { s.Errors = []ErrorCode{{Name: "A", Code: 1, Python: "KeyError"}} },
	} {
		s := ok()
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := Generate(&s); err == nil {
			t.Errorf("%s: generated", name)
		}
	}
}

func sortedKeys(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n- " + a + "\n+ " + b
		}
	}
	return ""
}
