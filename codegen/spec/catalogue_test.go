package spec_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/codegen/split"
)

// updating reports -update (the flag spec's internal tests define).
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// catalogue is the check hvdgen generate adds for declared layers.
func catalogue(s *spec.Spec) error {
	if s.Model == nil || s.Model.Factory != "" || len(s.Model.Layers) == 0 {
		return nil
	}
	_, err := split.Catalogue(s)
	return err
}

// Golden cases with the split catalogue as a check: testdata/catalogue/
// <case>.txtar holds hvd.yaml and the errors ParseWith reports — the key
// errors and the layer and shape errors in one list, in file order.
// go test ./codegen/spec -update rewrites the errors sections.
func TestCatalogueGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/catalogue/*.txtar")
	if len(cases) == 0 {
		t.Fatal("no testdata/catalogue/*.txtar")
	}
	for _, path := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var in, want []byte
			for _, f := range ar.Files {
				switch f.Name {
				case "hvd.yaml":
					in = f.Data
				case "errors":
					want = f.Data
				}
			}
			_, err = spec.ParseWith("hvd.yaml", in, catalogue)
			var got []byte
			if err != nil {
				got = []byte(err.Error() + "\n")
				if !errors.Is(err, spec.ErrInvalid) {
					t.Errorf("error is not spec.ErrInvalid: %v", err)
				}
			}
			if updating() {
				ar.Files = []txtar.File{{Name: "hvd.yaml", Data: in}, {Name: "errors", Data: got}}
				if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !bytes.Equal(got, want) {
				t.Errorf("errors differ (go test ./codegen/spec -update to accept):\n--- want\n%s--- got\n%s", want, got)
			}
		})
	}
}

// Every key error and every layer error of the file come in one run, in
// file order; a check's error about a value Parse already reported is left
// out.
func TestParseWithReportsEverything(t *testing.T) {
	y := `version: 1
projct: p
framework: pytorch
generate: [split]
model:
  layers:
    - type: Linear
      args: {in_features: 4, out_features: 8}
    - type: Linear
      args: {in_features: 16, out_features: 2}
    - type: Linaer
      args: {in_features: 2, out_features: 2}
    - type: ReLU
      cost: fast
parallel:
  stages: 2
  schedule: gpipy
`
	_, err := spec.ParseWith("hvd.yaml", []byte(y), catalogue)
	var l spec.ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("%v", err)
	}
	var got []string
	for _, e := range l {
		got = append(got, e.Path)
	}
	want := []string{"", "model.layers[1].args.in_features", "model.layers[2].type", "model.layers[3].cost", "parallel.schedule"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("paths %q, want %q\n%v", got, want, err)
	}
	for i := 1; i < len(l); i++ {
		if l[i].Line < l[i-1].Line {
			t.Fatalf("not in file order:\n%v", err)
		}
	}
	// Parse alone (no checks) reports only the spec's own problems.
	_, err = spec.Parse("hvd.yaml", []byte(y))
	if strings.Contains(err.Error(), "Linaer") {
		t.Fatalf("Parse ran the catalogue: %v", err)
	}
}

// A check that panics on a partial spec does not hide the spec's errors;
// on a valid spec its panic is an error, not a crash.
func TestParseWithPanickingCheck(t *testing.T) {
	boom := func(*spec.Spec) error { panic("boom") }
	_, err := spec.ParseWith("hvd.yaml", []byte("version: 1\nproject: p\nframework: cobol\n"), boom)
	if err == nil || strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "framework") {
		t.Fatalf("partial spec: %v", err)
	}
	_, err = spec.ParseWith("hvd.yaml", []byte("version: 1\nproject: p\nframework: go\n"), boom)
	if err == nil || !strings.Contains(err.Error(), "internal error") || !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("valid spec: %v", err)
	}
	plain := func(*spec.Spec) error { return errors.New("plain") }
	if _, err := spec.ParseWith("hvd.yaml", []byte("version: 1\nproject: p\nframework: go\n"), plain); err == nil || err.Error() != "hvd.yaml: plain" {
		t.Fatalf("plain error: %v", err)
	}
}
