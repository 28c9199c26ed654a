// Package scaffold generates starter projects for `hvdgen init`: an
// hvd.yaml, a data-parallel training script, a README and a Makefile whose
// `run` target trains on 2 processes under hvdrun. Generation is a pure
// function of Options (text/template over embedded templates); the caller
// writes the files.
package scaffold

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/hvdorg/hvd/codegen/spec"
)

// Frameworks that have a scaffold. The pytorch and go projects are run
// under hvdrun by cmd/hvdgen's tests; tensorflow and mxnet cannot be (their
// frameworks are not installable where hvd is tested): their train.py is
// only byte-compiled.
var Frameworks = []string{"pytorch", "go", "tensorflow", "mxnet"}

// python frameworks: module (hvd.<module>) and display name.
var python = map[string][2]string{
	"pytorch":    {"torch", "PyTorch"},
	"tensorflow": {"tensorflow", "TensorFlow"},
	"mxnet":      {"mxnet", "MXNet"},
}

// data is what the templates see.
type data struct {
	Options
	Module string // hvd.<Module>: torch, tensorflow, mxnet ("" for go)
	Title  string // PyTorch, TensorFlow, MXNet
}

// HvdModule is the Go module path of the SDK a Go scaffold requires.
const HvdModule = "github.com/hvdorg/hvd"

// Options describe the project.
type Options struct {
	Framework string // one of Frameworks
	// Name of the project (letters, digits, '-', '_', '.', starting with a
	// letter, as hvd.yaml's project); default "myproject".
	Name string
	// HvdReplace, for a Go project, is a directory holding a checkout of
	// the hvd module; go.mod gets a replace directive pointing at it
	// (without one, go.mod requires the published module).
	HvdReplace string
	// HvdVersion is the version of the hvd module a Go project requires
	// (default v0.0.0-00010101000000-000000000000 with HvdReplace, else latest).
	HvdVersion string
	// GoSum, for a Go project with HvdReplace, is the go.sum of the hvd
	// source it points at: written as the project's go.sum, so that `go mod
	// tidy` finds the checksums of hvd's dependencies without asking a
	// checksum database (it drops the lines the project does not need).
	GoSum []byte
	// Hvdrun is an absolute path the Makefile tries last for hvdrun (the
	// one next to hvdgen); "" for none. No spaces, quotes or '$' (make
	// cannot quote them).
	Hvdrun string
}

var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,99}$`)

// Validate checks the options and fills defaults.
func (o *Options) Validate() error {
	if !contains(Frameworks, o.Framework) {
		return fmt.Errorf("scaffold: unknown framework %q; choose one of %s", o.Framework, strings.Join(Frameworks, ", "))
	}
	if o.Name == "" {
		o.Name = "myproject"
	}
	if !nameRE.MatchString(o.Name) {
		return fmt.Errorf("scaffold: project name %q: use letters, digits, '.', '-' and '_', starting with a letter (at most 100)", o.Name)
	}
	if o.HvdVersion == "" {
		o.HvdVersion = "v0.0.0-00010101000000-000000000000"
	}
	if strings.ContainsAny(o.HvdReplace, "\n\"`") {
		return fmt.Errorf("scaffold: replace path %q has a newline or quote", o.HvdReplace)
	}
	if o.Hvdrun != "" && (!path.IsAbs(o.Hvdrun) || strings.ContainsAny(o.Hvdrun, " \t\n\"'`$\\#%")) {
		return fmt.Errorf("scaffold: hvdrun path %q: want an absolute path without spaces, quotes, '$', '#' or '%%' (make cannot quote them)", o.Hvdrun)
	}
	if o.GoSum != nil && (o.Framework != "go" || o.HvdReplace == "") {
		return fmt.Errorf("scaffold: a go.sum is for a Go project with a replace directive")
	}
	return nil
}

//go:embed templates
var templates embed.FS

// Generate returns the project's files by slash path (relative to the
// project directory). hvd.yaml is spec.Default for the framework with the
// project's name, written by spec.Marshal, so it is valid by construction.
func Generate(o Options) (map[string][]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	sp := spec.Default(spec.Framework(o.Framework))
	sp.Project = o.Name
	yml, err := spec.Marshal(sp)
	if err != nil {
		return nil, fmt.Errorf("scaffold: hvd.yaml: %w", err)
	}
	out := map[string][]byte{"hvd.yaml": yml}
	if o.GoSum != nil {
		out["go.sum"] = bytes.Clone(o.GoSum)
	}
	dirs := []string{"templates/" + o.Framework}
	td := data{Options: o}
	if py, ok := python[o.Framework]; ok {
		dirs = []string{"templates/python", "templates/" + o.Framework}
		td.Module, td.Title = py[0], py[1]
	}
	for _, dir := range dirs {
		err := fs.WalkDir(templates, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			src, err := fs.ReadFile(templates, p)
			if err != nil {
				return err
			}
			name := strings.TrimSuffix(strings.TrimPrefix(p, dir+"/"), ".tmpl")
			if path.Base(name) == "gitignore" { // embed skips dot files
				name = path.Join(path.Dir(name), ".gitignore")
			}
			t, err := template.New(name).Option("missingkey=error").Parse(string(src))
			if err != nil {
				return fmt.Errorf("scaffold: template %s: %w", p, err)
			}
			var b bytes.Buffer
			if err := t.Execute(&b, td); err != nil {
				return fmt.Errorf("scaffold: template %s: %w", p, err)
			}
			out[path.Clean(name)] = b.Bytes()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Paths returns the keys of files, sorted.
func Paths(files map[string][]byte) []string {
	ps := make([]string, 0, len(files))
	for p := range files {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
