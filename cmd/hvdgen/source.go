package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/hvdorg/hvd/codegen/scaffold"
)

// hvdSourceDir may be set at build time (go build -ldflags "-X
// main.hvdSourceDir=/path/to/hvd") to the hvd source a Go scaffold's
// go.mod points at; empty: the directory this file was compiled from.
var hvdSourceDir string

// hvdSource returns the hvd module's source directory that hvdgen was built
// from, for the replace directive of a Go scaffold (the module is not
// published on a module proxy), or "" when it is unknown (a -trimpath build)
// or no longer holds the hvd module.
func hvdSource() string {
	dir := hvdSourceDir
	if dir == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok || !filepath.IsAbs(file) {
			return ""
		}
		dir = filepath.Dir(filepath.Dir(filepath.Dir(file))) // <root>/cmd/hvdgen/source.go
	}
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || modulePath(data) != scaffold.HvdModule {
		return ""
	}
	return dir
}

// modulePath returns the module path a go.mod declares ("" when none).
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// hvdrunNextToHvdgen returns the hvdrun beside the running hvdgen, or "".
func hvdrunNextToHvdgen() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), "hvdrun")
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return ""
	}
	return p
}
