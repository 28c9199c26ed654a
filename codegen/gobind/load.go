package gobind

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"
)

// Load is Config{}.Load.
func Load(dir string, patterns ...string) ([]*packages.Package, error) {
	return Config{}.Load(dir, patterns...)
}

// Load loads the packages matching patterns (go/packages syntax, e.g.
// "./..."; passed through uninterpreted) from dir, with what Generate
// needs. An earlier output of this generator (a file named c.Output that
// starts with the generated-code header) is read as an empty file, so that
// a stale one — naming a field since removed — cannot stop the package
// from loading. Load fails when a package has errors or nothing matches.
// It runs the go command.
func (c Config) Load(dir string, patterns ...string) ([]*packages.Package, error) {
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	// First pass: file lists only, to find earlier outputs.
	list, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedFiles, Dir: dir}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("gobind: listing %s in %s: %w", strings.Join(patterns, " "), dir, err)
	}
	overlay := map[string][]byte{}
	for _, p := range list {
		for _, file := range p.GoFiles {
			if filepath.Base(file) != c.output() {
				continue
			}
			if head, err := readHead(file); err == nil && bytes.HasPrefix(head, []byte("// "+Header+"\n")) {
				overlay[file] = []byte("// " + Header + "\n\npackage " + p.Name + "\n")
			}
		}
	}
	pkgs, err := packages.Load(&packages.Config{Mode: LoadMode, Dir: dir, Overlay: overlay}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("gobind: loading %s in %s: %w", strings.Join(patterns, " "), dir, err)
	}
	var msgs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			msgs = append(msgs, e.Error())
		}
	})
	if len(msgs) > 0 {
		return nil, fmt.Errorf("gobind: loading %s: the packages have errors (fix them first):\n%s", strings.Join(patterns, " "), strings.Join(msgs, "\n"))
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("gobind: no packages match %s in %s", strings.Join(patterns, " "), dir)
	}
	return pkgs, nil
}

func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 128)
	n, _ := f.Read(buf)
	return buf[:n], nil
}
