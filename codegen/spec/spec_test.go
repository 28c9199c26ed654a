package spec

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the errors / marshal.yaml sections of testdata/*.txtar")

// Golden cases: testdata/<case>.txtar holds hvd.yaml and either the
// expected errors (one per line) or, for a valid file, marshal.yaml: what
// Marshal writes for the parsed spec (which must parse back to the same
// spec and marshal to the same bytes).
func TestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/*.txtar")
	if len(cases) == 0 {
		t.Fatal("no testdata/*.txtar")
	}
	for _, path := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			in, ok := section(ar, "hvd.yaml")
			if !ok {
				t.Fatal("no hvd.yaml section")
			}
			s, perr := Parse("hvd.yaml", in)
			var name string
			var got []byte
			if perr != nil {
				if s != nil {
					t.Errorf("Parse returned a spec with an error")
				}
				if !errors.Is(perr, ErrInvalid) {
					t.Errorf("error does not wrap ErrInvalid: %v", perr)
				}
				name, got = "errors", []byte(perr.Error()+"\n")
			} else {
				out, err := Marshal(s)
				if err != nil {
					t.Fatalf("Marshal of a parsed spec: %v", err)
				}
				checkRoundTrip(t, s, out)
				name, got = "marshal.yaml", out
			}
			if *update {
				files := []txtar.File{{Name: "hvd.yaml", Data: in}, {Name: name, Data: got}}
				ar.Files = files
				if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, ok := section(ar, name)
			if !ok {
				t.Fatalf("no %s section; got %s:\n%s\n(run go test ./codegen/spec -update)", name, name, got)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs (run go test ./codegen/spec -update to accept):\n--- want\n%s--- got\n%s", name, want, got)
			}
		})
	}
}

func section(ar *txtar.Archive, name string) ([]byte, bool) {
	for _, f := range ar.Files {
		if f.Name == name {
			return f.Data, true
		}
	}
	return nil, false
}

// exported is s without what Parse records about the file.
func exported(s *Spec) Spec {
	c := *s
	c.file, c.pos, c.bad = "", nil, nil
	return c
}

// checkRoundTrip: out (Marshal(s)) parses back to s and marshals to out.
func checkRoundTrip(t testing.TB, s *Spec, out []byte) {
	t.Helper()
	s2, err := Parse("again.yaml", out)
	if err != nil {
		t.Fatalf("Marshal output does not parse: %v\n%s", err, out)
	}
	if a, b := exported(s), exported(s2); !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip changed the spec:\n%#v\n%#v\n%s", a, b, out)
	}
	out2, err := Marshal(s2)
	if err != nil || !bytes.Equal(out, out2) {
		t.Fatalf("Marshal is not stable (%v):\n%s\n---\n%s", err, out, out2)
	}
}

// The message format, exactly as users see it, and errors.As on the list.
func TestErrorPosition(t *testing.T) {
	in := "version: 1\nproject: p\nframework: pytorch\nmodel:\n  layers: [{type: Linear}, {type: ReLU}]\nparallel:\n   stages: two\n"
	_, err := Parse("hvd.yaml", []byte(in))
	if err == nil {
		t.Fatal("accepted stages: two")
	}
	const want = `hvd.yaml:7:12: parallel.stages: expected a positive integer, got "two"`
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 7 || e.Column != 12 || e.Path != "parallel.stages" {
		t.Fatalf("errors.As: %#v", e)
	}
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 1 {
		t.Fatalf("not an ErrorList of one: %#v", err)
	}
}

// Every problem is reported, in file order, not just the first.
func TestAllProblemsReported(t *testing.T) {
	in := `version: 2
project: "my project"
framework: pytroch
generate: [bindingz, split]
parallel:
  stages: 0
  data_parallel: -1
  schedule: gpip
`
	_, err := Parse("x.yaml", []byte(in))
	var l ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("not an ErrorList: %v", err)
	}
	var lines []int
	for _, e := range l {
		lines = append(lines, e.Line)
	}
	want := []int{1, 2, 3, 4, 6, 6, 7, 8} // parallel (6:3) needs a model; then stages (6:11)
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("error lines %v, want %v:\n%v", lines, want, err)
	}
	for _, s := range []string{`(did you mean "pytorch"?)`, `(did you mean "bindings"?)`, `(did you mean "gpipe"?)`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("no %s in:\n%v", s, err)
		}
	}
}

func TestDefaultRoundTrips(t *testing.T) {
	for _, fw := range Frameworks {
		t.Run(string(fw), func(t *testing.T) {
			s := Default(fw)
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			out, err := Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse("hvd.yaml", out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if a, b := exported(s), exported(got); !reflect.DeepEqual(a, b) {
				t.Fatalf("Default(%s) changed through Marshal/Parse:\n%#v\n%#v", fw, a, b)
			}
			checkRoundTrip(t, got, out)
			if !bytes.Contains(out, []byte("# ")) {
				t.Fatalf("Marshal wrote no comments:\n%s", out)
			}
			if fw.Python() != s.Has(GenBindings) || (fw == Go) != s.Has(GenGoBindings) {
				t.Fatalf("generators %v for %s", s.Generate, fw)
			}
		})
	}
}

// A Spec built in Go is validated by Marshal; errors have no position.
func TestMarshalRejectsInvalid(t *testing.T) {
	s := Default(PyTorch)
	s.Parallel.Stages = 9 // more than the 5 layers
	s.Model.Layers[1].Args = []Arg{{Name: "lambda", Value: 1.0}, {Name: "x", Value: map[string]int{}}}
	_, err := Marshal(s)
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 3 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("want 3 problems, got %v", err)
	}
	for _, e := range l {
		if e.Line != 0 || e.File != "" {
			t.Errorf("a Go-built spec has no positions: %#v", e)
		}
	}
	if !strings.Contains(err.Error(), "parallel.stages: 9 stages but the model has 5 layers") {
		t.Fatalf("message: %v", err)
	}
}

// Positions stay available to generators and plugins after Parse.
func TestErrorAt(t *testing.T) {
	in := "version: 1\nproject: p\nframework: pytorch\nmodel:\n  layers:\n    - type: Linear\n    - type: Frobnicate\n      args: {k: 3}\nparallel: {stages: 2}\n"
	s, err := Parse("hvd.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	e := s.ErrorAt("model.layers[1].type", "unknown layer type %q", s.Model.Layers[1].Type)
	if got := e.Error(); got != `hvd.yaml:7:13: model.layers[1].type: unknown layer type "Frobnicate"` {
		t.Fatal(got)
	}
	if p := s.Pos("model.layers[1].args.k"); p != (Pos{8, 17}) {
		t.Fatalf("arg position %v", p)
	}
	if s.Parallel.DataParallel != 1 || s.Parallel.MicroBatches != 1 || s.Parallel.Schedule != GPipe || s.Parallel.Ranks() != 2 {
		t.Fatalf("defaults not applied: %+v", s.Parallel)
	}
	if s.File() != "hvd.yaml" {
		t.Fatal(s.File())
	}
}

func TestArgValues(t *testing.T) {
	in := `version: 1
project: p
framework: pytorch
model:
  layers:
    - type: Conv2d
      args: {a: 1, b: 2.5, c: true, d: null, e: "7", f: [3, [4, 5]], g: x, h: 0x10, i: -0.0, j: []}
parallel: {stages: 1}
`
	s, err := Parse("hvd.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Arg{{"a", int64(1)}, {"b", 2.5}, {"c", true}, {"d", nil}, {"e", "7"},
		{"f", []any{int64(3), []any{int64(4), int64(5)}}}, {"g", "x"}, {"h", int64(16)}, {"i", 0.0}, {"j", []any{}}}
	if got := s.Model.Layers[0].Args; !reflect.DeepEqual(got, want) {
		t.Fatalf("args\n got %#v\nwant %#v", got, want)
	}
	out, _ := Marshal(s)
	checkRoundTrip(t, s, out)
}

// Aliases cannot blow a short file up into billions of values.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\nproject: p\nframework: pytorch\nparallel: {stages: 1}\nmodel:\n  layers:\n    - type: L\n      args:\n")
	b.WriteString("        a: &a [" + strings.TrimSuffix(strings.Repeat("1,", 1000), ",") + "]\n")
	b.WriteString("        b: &b [" + strings.TrimSuffix(strings.Repeat("*a,", 1000), ",") + "]\n")
	b.WriteString("        c: [" + strings.TrimSuffix(strings.Repeat("*b,", 1000), ",") + "]\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("accepted or wrong error: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"stage", "stages", 1}, {"framwork", "framework", 1}, {"gpip", "gpipe", 1}, {"abc", "xyz", 3}} {
		if d := distance(c.a, c.b); d != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
	if s := suggest("xyz", []string{"stages"}); s != "" {
		t.Errorf("suggested %q for an unrelated word", s)
	}
}

// FuzzParse: Parse never panics; what it accepts marshals, parses back to
// the same spec and marshals to the same bytes; what it rejects is an
// ErrorList of positioned, non-empty messages.
func FuzzParse(f *testing.F) {
	cases, _ := filepath.Glob("testdata/*.txtar")
	for _, path := range cases {
		ar, err := txtar.ParseFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if in, ok := section(ar, "hvd.yaml"); ok {
			f.Add(in)
		}
	}
	for _, fw := range Frameworks {
		out, _ := Marshal(Default(fw))
		f.Add(out)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data)
		if err != nil {
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 || !errors.Is(err, ErrInvalid) || s != nil {
				t.Fatalf("bad error value %T %v", err, err)
			}
			for _, e := range l {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("bad error %#v", e)
				}
			}
			return
		}
		out, err := Marshal(s)
		if err != nil {
			t.Fatalf("Marshal of a parsed spec: %v", err)
		}
		checkRoundTrip(t, s, out)
	})
}

func TestErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Column: 4, Path: "p", Msg: "m"}, "a.yaml:3:4: p: m"},
		{Error{File: "a.yaml", Line: 3, Msg: "m"}, "a.yaml:3: m"},
		{Error{File: "a.yaml", Msg: "m"}, "a.yaml: m"},
		{Error{Path: "p", Msg: "m"}, "p: m"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.e, got, c.want)
		}
	}
}

// model.input_shape built in Go: checked by Validate, written by Marshal,
// read back by Parse.
func TestInputShape(t *testing.T) {
	s := Default(PyTorch)
	s.Model.InputShape = []int{16}
	out, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("input_shape: [16]")) {
		t.Fatalf("no input_shape in:\n%s", out)
	}
	checkRoundTrip(t, s, out)
	got, _ := Parse("hvd.yaml", out)
	if !reflect.DeepEqual(got.Model.InputShape, []int{16}) {
		t.Fatalf("input_shape read back as %v", got.Model.InputShape)
	}
	for _, c := range []struct {
		shape []int
		want  string
	}{
		{[]int{}, "model.input_shape: expected at least one dimension"},
		{[]int{3, 0}, "model.input_shape[1]: expected a positive integer"},
		{[]int{1, 1, 1, 1, 1, 1, 1, 1, 1}, "9 dimensions is more than the 8"},
		{[]int{1 << 20, 1 << 20}, "more than 1073741824 elements per sample"},
	} {
		s.Model.InputShape = c.shape
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input_shape %v: got %v, want %q", c.shape, err, c.want)
		}
	}
}

// YAML syntax errors are reported at the line (and column) that is wrong,
// not where yaml.v3's context began.
func TestSyntaxErrorAtBrokenLine(t *testing.T) {
	head := "version: 1\nproject: p\nframework: pytorch\n"
	for _, c := range []struct {
		name      string
		yaml      string
		line, col int // of the broken line, counting the 3 head lines
	}{
		{"key indented too little", head + "parallel:\n  stages: 2\n data_parallel: 2\n", 6, 2},
		{"key indented too much", head + "parallel:\n  stages: 2\n     data_parallel: 2\n", 6, 19}, // read as a continuation of "2": the colon is wrong
		{"tab", head + "parallel:\n\tstages: 2\n", 5, 1},
		{"second colon", "version: 1\nproject: a: b\nframework: pytorch\n", 2, 11},
		{"unclosed quote", "version: 1\nproject: \"abc\nframework: pytorch\n", 2, 10},
		{"unclosed flow mapping", head + "model:\n  layers:\n    - type: Linear\n      args: {in_features: 4, out_features: 2\n    - type: ReLU\n", 7, 13},
		{"list item out of line", head + "model:\n  layers:\n    - type: Linear\n   - type: ReLU\n", 7, 4},
		{"wrong bracket in a flow list", head + "model:\n  layers: [\n    {type: Linear},\n    {type: ReLU]\n  ]\n", 7, 5},
		{"list then scalar", head + "generate:\n  - split\n  bindings\n", 6, 3},
		{"deeper key out of line", head + "model:\n  layers:\n    - type: Linear\n      args:\n        in_features: 4\n       out_features: 2\n", 9, 8},
		{"indented root key", "version: 1\nproject: p\n  framework: pytorch\n", 3, 12},
		{"long line (bisected)", "version: 1\nproject: " + strings.Repeat("a", 200) + ": b\nframework: pytorch\n", 2, 210},
	} {
		_, err := Parse("hvd.yaml", []byte(c.yaml))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if e.Line != c.line || e.Column != c.col || !strings.Contains(e.Msg, "invalid YAML") {
			lines := strings.Split(c.yaml, "\n")
			t.Errorf("%s: reported %d:%d %q, want %d:%d (the broken line %q)", c.name, e.Line, e.Column, e.Msg, c.line, c.col, lines[c.line-1])
		}
	}
}

// Huge malformed files fall back to the library's line without searching.
func TestSyntaxErrorLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\nproject: p\nframework: pytorch\nmodel:\n  layers:\n")
	for i := 0; i < maxLocateLines+10; i++ {
		b.WriteString("    - type: ReLU\n")
	}
	b.WriteString("   - type: ReLU\n")
	_, err := Parse("hvd.yaml", []byte(b.String()))
	var e *Error
	if !errors.As(err, &e) || e.Line == 0 || !strings.Contains(e.Msg, "invalid YAML") {
		t.Fatalf("%v", err)
	}
}
