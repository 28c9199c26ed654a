package gobind

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/codegen/spec"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the want/ sections of testdata/*.txtar")

// extract writes the archive's input files (everything but want/) into a
// new temporary directory.
func extract(t *testing.T, ar *txtar.Archive) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range ar.Files {
		if strings.HasPrefix(f.Name, "want/") {
			continue
		}
		p := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// generate loads ./... in dir and generates; paths and errors are made
// relative to dir.
func generate(t *testing.T, dir string) (map[string][]byte, error) {
	t.Helper()
	pkgs, err := Load(dir, "./...")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	files, err := Generate(pkgs)
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""))
	}
	rel := map[string][]byte{}
	for p, b := range files {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		rel[filepath.ToSlash(r)] = b
	}
	return rel, nil
}

func sortedKeys(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Golden cases: testdata/<case>.txtar holds a module (go.mod and package
// files) and the expected output: want/<path> for every generated file, or
// want/errors. After generating, the files are written into the module and
// generation runs again: the output must not change (the earlier output is
// ignored when loading, and generation does not depend on it).
func TestGolden(t *testing.T) {
	cases, _ := filepath.Glob("testdata/*.txtar")
	if len(cases) == 0 {
		t.Fatal("no testdata/*.txtar")
	}
	for _, path := range cases {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			t.Parallel()
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dir := extract(t, ar)
			got, gerr := generate(t, dir)
			want := map[string][]byte{}
			var inputs []txtar.File
			for _, f := range ar.Files {
				if name, ok := strings.CutPrefix(f.Name, "want/"); ok {
					want[name] = f.Data
				} else {
					inputs = append(inputs, f)
				}
			}
			if gerr != nil {
				got = map[string][]byte{"errors": []byte(gerr.Error() + "\n")}
			}
			if *update {
				ar.Files = inputs
				for _, p := range sortedKeys(got) {
					ar.Files = append(ar.Files, txtar.File{Name: "want/" + p, Data: got[p]})
				}
				if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				for _, p := range sortedKeys(want) {
					if _, ok := got[p]; !ok {
						t.Errorf("want/%s was not generated (run go test ./codegen/gobind -update)", p)
					}
				}
				for _, p := range sortedKeys(got) {
					w, ok := want[p]
					switch {
					case !ok:
						t.Errorf("generated %s, which the case does not expect:\n%s", p, got[p])
					case !bytes.Equal(w, got[p]):
						t.Errorf("%s differs (run go test ./codegen/gobind -update to accept):\n%s", p, firstDiff(string(w), string(got[p])))
					}
				}
			}
			if gerr != nil {
				return
			}
			// Idempotence: with the output in place, the same output.
			for p, b := range got {
				if !bytes.HasPrefix(b, []byte("// "+Header+"\n")) {
					t.Errorf("%s does not start with the header", p)
				}
				if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			again, err := generate(t, dir)
			if err != nil {
				t.Fatalf("generating again over the output: %v", err)
			}
			if len(again) != len(got) {
				t.Fatalf("generated %d files the second time, %d the first", len(again), len(got))
			}
			for p := range got {
				if !bytes.Equal(got[p], again[p]) {
					t.Errorf("%s changed when generated again:\n%s", p, firstDiff(string(got[p]), string(again[p])))
				}
			}
			// The output compiles against the SDK.
			if testing.Short() {
				return
			}
			useSDK(t, dir)
			if out, err := goCmd(dir, "build", "./...").CombinedOutput(); err != nil {
				t.Fatalf("go build ./... with the generated files: %v\n%s", err, out)
			}
		})
	}
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

// The spec's default output name is this generator's.
func TestDefaultOutputMatchesSpec(t *testing.T) {
	if spec.DefaultGoOutput != DefaultOutput {
		t.Fatalf("spec.DefaultGoOutput %q != gobind.DefaultOutput %q", spec.DefaultGoOutput, DefaultOutput)
	}
}

// Errors are an ErrorList of positioned problems, usable with errors.As.
func TestErrorsArePositioned(t *testing.T) {
	ar := txtar.Parse([]byte(`
-- go.mod --
module example.com/m

go 1.26
-- p/p.go --
package p

//hvd:tensors
type M struct {
	A []float32
	B map[string]float32
}
`))
	dir := extract(t, ar)
	pkgs, err := Load(dir, "./...")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Generate(pkgs)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("not an *Error wrapping ErrInvalid: %v", err)
	}
	if filepath.Base(e.Pos.Filename) != "p.go" || e.Pos.Line != 6 || !strings.Contains(e.Msg, "M.B") {
		t.Fatalf("error at %v: %s", e.Pos, e.Msg)
	}
}

// An earlier output in a package whose marks are gone is reported stale; one
// that is regenerated is not.
func TestStale(t *testing.T) {
	ar := txtar.Parse([]byte(`
-- go.mod --
module example.com/m

go 1.26
-- gone/gone.go --
package gone

type T struct{ A []float32 }
-- gone/hvd_tensors_gen.go --
// Code generated by hvdgen. DO NOT EDIT.

package gone

func (m *T) Old() []float32 { return m.Removed }
-- kept/kept.go --
package kept

//hvd:tensors
type K struct{ A []float32 }
-- kept/hvd_tensors_gen.go --
// Code generated by hvdgen. DO NOT EDIT.

package kept
-- mine/hvd_tensors_gen.go --
package mine

// Not generated by hvdgen: no header, never stale.
var X = 1
`))
	dir := extract(t, ar)
	pkgs, err := Load(dir, "./...")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Generate(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files[filepath.Join(dir, "kept", DefaultOutput)]; !ok || len(files) != 1 {
		t.Fatalf("generated %v", sortedKeys(files))
	}
	got := Stale(pkgs, files)
	if want := []string{filepath.Join(dir, "gone", DefaultOutput)}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Stale = %v, want %v", got, want)
	}
}

// Load reports packages that do not compile, and patterns matching nothing.
func TestLoadErrors(t *testing.T) {
	ar := txtar.Parse([]byte(`
-- go.mod --
module example.com/m

go 1.26
-- p/p.go --
package p

var x int = "not an int"
`))
	dir := extract(t, ar)
	if _, err := Load(dir, "./..."); err == nil || !strings.Contains(err.Error(), "p.go:3") {
		t.Fatalf("want a type error naming p.go:3, got %v", err)
	}
	if _, err := Load(dir, "./nothing/..."); err == nil {
		t.Fatal("a pattern matching nothing loaded")
	}
}

// useSDK makes the module in dir require hvd, replaced by this checkout.
func useSDK(t *testing.T, dir string) {
	t.Helper()
	root := repoRoot(t)
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod = append(mod, []byte("\nrequire github.com/hvdorg/hvd v0.0.0\n\nreplace github.com/hvdorg/hvd => "+root+"\n")...)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
}

// goCmd is the go command in dir, offline, free to complete go.mod from the
// module cache (which holds hvd's dependencies).
func goCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	return cmd
}

// repoRoot is the directory of hvd's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/hvdorg/hvd\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("hvd's go.mod not found above the test directory")
		}
		dir = parent
	}
}

// The generated code compiles against the real SDK and works: a program
// runs two ranks in one process (two Worlds on a shared in-memory store)
// and checks AllreduceAll (in place, Sum and Average, fp16 compression),
// BroadcastAll, AllgatherAll with different lengths per rank, a process
// set the caller is not in, and the names HvdTensors reports. Then the same
// program runs as 2 and 3 processes under hvdrun through sdk.Init, with nil
// process sets (the global set), including a mismatch that must fail.
func TestGeneratedCodeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program against the SDK (go build); not in -short")
	}
	dir := extract(t, txtar.Parse(runModule))
	useSDK(t, dir)
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOWORK", "off")
	pkgs, err := Load(dir, "./model")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Generate(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("generated %d files, want 1", len(files))
	}
	for p, b := range files {
		if want := filepath.Join(dir, "model", DefaultOutput); p != want {
			t.Fatalf("generated %s, want %s", p, want)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if out, err := goCmd(dir, "build", "-o", "prog", ".").CombinedOutput(); err != nil {
		t.Fatalf("go build of the generated code: %v\n%s\n%s", err, out, files[filepath.Join(dir, "model", DefaultOutput)])
	}
	run := exec.CommandContext(ctx, filepath.Join(dir, "prog"))
	run.Dir = dir
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the program failed: %v\n%s", err, out)
	}
	for _, want := range []string{"rank 0: all checks passed", "rank 1: all checks passed"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
	t.Logf("%s", out)

	// The same program as real processes under hvdrun, through sdk.Init
	// and nil process sets (the process-wide global set).
	hvdrun := filepath.Join(t.TempDir(), "hvdrun")
	if out, err := goCmd(repoRoot(t), "build", "-o", hvdrun, "./cmd/hvdrun").CombinedOutput(); err != nil {
		t.Fatalf("building hvdrun: %v\n%s", err, out)
	}
	for _, np := range []string{"2", "3"} {
		run = exec.CommandContext(ctx, hvdrun, "-np", np, filepath.Join(dir, "prog"))
		run.Dir = dir
		out, err = run.CombinedOutput()
		if err != nil {
			t.Fatalf("hvdrun -np %s: %v\n%s", np, err, out)
		}
		if got := strings.Count(string(out), ": all checks passed"); strconv.Itoa(got) != np {
			t.Fatalf("hvdrun -np %s: %d ranks passed:\n%s", np, got, out)
		}
	}
}

var runModule = []byte(`
-- go.mod --
module example.com/run

go 1.26
-- model/model.go --
package model

// Int16s is a named slice type: bound through its underlying []int16.
type Int16s []int16

// Weight is a named element type.
type Weight float32

// Params is what the program reduces.
//
//hvd:tensors
type Params struct {
	W      []Weight
	B      [3]float64
	Steps  []int64
	Counts Int16s ` + "`hvd:\"counts\"`" + `
	Note   string ` + "`hvd:\"-\"`" + `
	hidden []float32
}

// Touch keeps hidden used.
func (p *Params) Touch() { p.hidden = nil }
-- main.go --
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	"example.com/run/model"
	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

func main() {
	if os.Getenv("HOROVOD_RANK") != "" { // started by hvdrun: one rank per process
		if err := launched(); err != nil {
			fmt.Printf("launched rank %s: FAIL: %v\n", os.Getenv("HOROVOD_RANK"), err)
			os.Exit(1)
		}
		fmt.Printf("launched rank %s: all checks passed\n", os.Getenv("HOROVOD_RANK"))
		return
	}
	const n = 2
	st := backends.NewMemStore()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = rank(r, n, st)
		}()
	}
	wg.Wait()
	failed := false
	for r, err := range errs {
		if err != nil {
			fmt.Printf("rank %d: FAIL: %v\n", r, err)
			failed = true
		} else {
			fmt.Printf("rank %d: all checks passed\n", r)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// launched uses the process-wide World (sdk.Init): nil process sets.
func launched() error {
	if err := sdk.Init(sdk.Config{}); err != nil {
		return err
	}
	defer sdk.Shutdown()
	w, err := sdk.Current()
	if err != nil {
		return err
	}
	r, n := w.Rank(), w.Size()
	m := &model.Params{W: []model.Weight{model.Weight(r + 1)}, Steps: make([]int64, r+1), Counts: model.Int16s{1}}
	if err := m.AllreduceAll(nil, sdk.ReduceOptions{}); err == nil {
		return fmt.Errorf("AllreduceAll with Steps of different lengths per rank succeeded")
	}
	m.Steps = []int64{int64(r)}
	if err := m.AllreduceAll(nil, sdk.ReduceOptions{Op: sdk.Sum, Name: "again"}); err != nil {
		return fmt.Errorf("AllreduceAll(nil): %w", err)
	}
	if want := model.Weight(n * (n + 1) / 2); m.W[0] != want || m.Counts[0] != int16(n) {
		return fmt.Errorf("AllreduceAll(nil): %+v", m)
	}
	m.B = [3]float64{float64(r), 1, 2}
	if err := m.BroadcastAll(nil, n-1); err != nil || m.B[0] != float64(n-1) {
		return fmt.Errorf("BroadcastAll(nil, %d): %v, B = %v", n-1, err, m.B)
	}
	g, err := m.AllgatherAll(nil)
	if err != nil || len(g.W) != n || len(g.Steps) != n {
		return fmt.Errorf("AllgatherAll(nil): %v, %+v", err, g)
	}
	return nil
}

func rank(r, n int, st backends.Store) error {
	w, err := sdk.Start(context.Background(), sdk.Config{
		Identity:    &rendezvous.Identity{Rank: r, Size: n, Hostname: "h", Timeout: 20 * time.Second},
		Store:       st,
		HostKey:     "host0",
		ProcessSets: [][]int{{1}},
		Getenv:      func(string) (string, bool) { return "", false },
	})
	if err != nil {
		return err
	}
	defer w.Close()
	ps := w.GlobalProcessSet()
	f := float64(r + 1)
	m := &model.Params{
		W:      []model.Weight{model.Weight(f), 10 * model.Weight(f)},
		B:      [3]float64{f, f * f, -f},
		Steps:  []int64{int64(r), 100},
		Counts: model.Int16s{int16(r + 1)},
		Note:   "kept",
	}
	names, ts := m.HvdTensors()
	if want := []string{"Params.W", "Params.B", "Params.Steps", "Params.counts"}; !reflect.DeepEqual(names, want) || len(ts) != 4 {
		return fmt.Errorf("HvdTensors names %v, want %v", names, want)
	}
	// Sum over ranks 1 and 2 (f = 1, 2).
	if err := m.AllreduceAll(ps, sdk.ReduceOptions{Op: sdk.Sum}); err != nil {
		return fmt.Errorf("AllreduceAll: %w", err)
	}
	if !reflect.DeepEqual(m.W, []model.Weight{3, 30}) || m.B != [3]float64{3, 5, -3} ||
		!reflect.DeepEqual(m.Steps, []int64{1, 200}) || !reflect.DeepEqual(m.Counts, model.Int16s{3}) || m.Note != "kept" {
		return fmt.Errorf("after AllreduceAll(Sum): %+v", m)
	}
	// Average, under a custom group name.
	if err := m.AllreduceAll(ps, sdk.ReduceOptions{Op: sdk.Average, Name: "avg"}); err != nil {
		return fmt.Errorf("AllreduceAll(Average): %w", err)
	}
	if !reflect.DeepEqual(m.W, []model.Weight{3, 30}) || m.B != [3]float64{3, 5, -3} {
		return fmt.Errorf("after AllreduceAll(Average): %+v", m)
	}
	// fp16 compression of the float fields goes through the copy-back path.
	m.W = []model.Weight{model.Weight(f) / 2, 1}
	if err := m.AllreduceAll(ps, sdk.ReduceOptions{Op: sdk.Sum, Compression: sdk.CompressionFP16}); err != nil {
		return fmt.Errorf("AllreduceAll(fp16): %w", err)
	}
	if !reflect.DeepEqual(m.W, []model.Weight{1.5, 2}) {
		return fmt.Errorf("after AllreduceAll(fp16): W = %v", m.W)
	}
	// Broadcast from global rank 1.
	m.W = []model.Weight{model.Weight(f), model.Weight(f)}
	m.B = [3]float64{f, f, f}
	if err := m.BroadcastAll(ps, 1); err != nil {
		return fmt.Errorf("BroadcastAll: %w", err)
	}
	if !reflect.DeepEqual(m.W, []model.Weight{2, 2}) || m.B != [3]float64{2, 2, 2} {
		return fmt.Errorf("after BroadcastAll(root 1): %+v", m)
	}
	// Allgather with a different length per rank.
	m.Steps = make([]int64, r+1)
	for i := range m.Steps {
		m.Steps[i] = int64(10*r + i)
	}
	g, err := m.AllgatherAll(ps)
	if err != nil {
		return fmt.Errorf("AllgatherAll: %w", err)
	}
	if !reflect.DeepEqual(g.Steps, []int64{0, 10, 11}) || !reflect.DeepEqual(g.W, []model.Weight{2, 2, 2, 2}) ||
		len(g.B) != 6 || !reflect.DeepEqual(g.Counts, []int16{6, 6}) {
		return fmt.Errorf("AllgatherAll: %+v", g)
	}
	// A set this rank is not in fails at call time, on rank 0 only.
	one, err := w.ProcessSet(1)
	if err != nil {
		return err
	}
	err = m.AllreduceAll(one, sdk.ReduceOptions{})
	if r == 0 && !errors.Is(err, sdk.ErrNotMember) {
		return fmt.Errorf("AllreduceAll on a set without this rank: %v, want ErrNotMember", err)
	}
	if r == 1 && err != nil {
		return fmt.Errorf("AllreduceAll on the set {1}: %w", err)
	}
	// nil: the process-wide set, which this program never initialised.
	if err := m.BroadcastAll(nil, 0); !errors.Is(err, sdk.ErrNotInitialized) {
		return fmt.Errorf("BroadcastAll(nil) without sdk.Init: %v, want ErrNotInitialized", err)
	}
	return ps.Barrier()
}
`)
