// Package pypkg assembles the hvd Python package a framework plugin emits:
// the shared core (hvd/__init__.py, hvd/common, hvd/runner) from the embedded sources
// in package python, plus the framework's own subpackage.
package pypkg

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"text/template"

	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/python"
)

// Core is what every framework package needs (the engines, hvd.spark and
// hvd.ray with what they share, hvd._driver, run any framework's training
// function).
var Core = []string{"hvd/__init__.py", "hvd/common", "hvd/runner", "hvd/_driver", "hvd/spark", "hvd/ray"}

// Select returns the embedded files at the given paths (a file, or a
// directory taken whole), sorted. A path that does not exist is an error.
func Select(paths ...string) (*plugin.FileSet, error) {
	src := python.FS()
	set := &plugin.FileSet{}
	for _, p := range paths {
		st, err := fs.Stat(src, p)
		if err != nil {
			return nil, fmt.Errorf("pypkg: %s is not in the embedded hvd package: %w", p, err)
		}
		if !st.IsDir() {
			data, err := fs.ReadFile(src, p)
			if err != nil {
				return nil, err
			}
			set.Add(p, data)
			continue
		}
		sub, err := plugin.FromFS(src, p, nil)
		if err != nil {
			return nil, err
		}
		set.Files = append(set.Files, sub.Files...)
	}
	set.Sort()
	return set, set.Validate()
}

// Has reports whether the embedded package has path p (e.g. "hvd/numpy").
func Has(p string) bool {
	_, err := fs.Stat(python.FS(), p)
	return err == nil
}

// Version is the embedded package's __version__.
func Version() string {
	v, err := python.Version()
	if err != nil {
		panic(err) // python's tests guarantee it
	}
	return v
}

// Merge adds the files of more to set (later paths replace earlier ones)
// and sorts.
func Merge(set *plugin.FileSet, more ...plugin.File) *plugin.FileSet {
	idx := map[string]int{}
	for i, f := range set.Files {
		idx[f.Path] = i
	}
	for _, f := range more {
		if i, ok := idx[f.Path]; ok {
			set.Files[i] = f
			continue
		}
		idx[f.Path] = len(set.Files)
		set.Files = append(set.Files, f)
	}
	set.Sort()
	return set
}

// IsPython reports whether p is a Python source path.
func IsPython(p string) bool { return strings.HasSuffix(path.Base(p), ".py") }

// Render executes a text/template (missing keys are errors).
func Render(name, src string, data any) ([]byte, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, fmt.Errorf("pypkg: template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("pypkg: template %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// NumpyCore is the numpy-level binding (hvd/numpy) the TensorFlow and
// MXNet packages run on, when the embedded package has it.
var NumpyCore = func() []string {
	if Has("hvd/numpy") {
		return []string{"hvd/numpy"}
	}
	return nil
}()
