// Package python embeds the sources of the hvd Python package
// (python/hvd) so that the framework plugins can emit them into a Python
// environment (`hvdgen plugin install`). Bytecode caches are not embedded.
package python

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sync"
)

// The patterns name the files (a directory pattern would drop names
// starting with "_", such as __init__.py, and take __pycache__).
//
//go:embed hvd/*.py hvd/*/*.py hvd/*/*/*.py
var files embed.FS

// FS returns the package sources, rooted above hvd/: paths look like
// "hvd/__init__.py" and "hvd/torch/mpi_ops.py".
func FS() fs.FS { return files }

var (
	versionOnce sync.Once
	version     string
	versionErr  error
)

// Version returns __version__ from hvd/__init__.py, the one place the
// package's version is written.
func Version() (string, error) {
	versionOnce.Do(func() {
		src, err := fs.ReadFile(files, "hvd/__init__.py")
		if err != nil {
			versionErr = err
			return
		}
		m := regexp.MustCompile(`(?m)^__version__\s*=\s*['"]([^'"]+)['"]`).FindSubmatch(src)
		if m == nil {
			versionErr = fmt.Errorf("python: no __version__ in hvd/__init__.py")
			return
		}
		version = string(m[1])
	})
	return version, versionErr
}
