// Package venvs finds, for tests, the cached virtual environments that
// .ci/setup.d creates under ${HVD_CACHE_DIR:-$HOME/.cache/hvd}: one per
// framework (30-frameworks.sh, keyed by the pinned versions) and one for
// the engines (20-engines.sh: pyspark and ray over Debian's torch).
package venvs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The framework versions 30-frameworks.sh pins.
const (
	TFVersion    = "2.15.1"
	MXNetVersion = "1.9.1"
)

// Venv is one cached environment.
type Venv struct {
	// Env, when set in the environment, names the interpreter instead.
	Env string
	// Dir is the venv's directory under CacheDir.
	Dir string
	// Imports are the modules the environment exists for.
	Imports []string
	// Setup is the script that creates it.
	Setup string
}

var (
	TensorFlow = Venv{Env: "HVD_TF_PYTHON", Dir: "venv-tf-" + TFVersion, Imports: []string{"tensorflow"}, Setup: ".ci/setup.d/30-frameworks.sh"}
	MXNet      = Venv{Env: "HVD_MXNET_PYTHON", Dir: "venv-mxnet-" + MXNetVersion, Imports: []string{"mxnet"}, Setup: ".ci/setup.d/30-frameworks.sh"}
	Engines    = Venv{Dir: "venv-engines-py311", Imports: []string{"torch", "pyspark", "ray"}, Setup: ".ci/setup.d/20-engines.sh"}
)

// CacheDir is where the venvs live: $HVD_CACHE_DIR, else ~/.cache/hvd.
func CacheDir() string {
	if d := os.Getenv("HVD_CACHE_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "hvd")
}

// Python returns the environment's interpreter ($Env when set, else
// <CacheDir>/<Dir>/bin/python) and, when it cannot import modules (the
// venv's own Imports when none are given), an error saying why and how to
// create it.
func (v Venv) Python(modules ...string) (string, error) {
	py := ""
	if v.Env != "" {
		py = os.Getenv(v.Env)
	}
	if py == "" {
		py = filepath.Join(CacheDir(), v.Dir, "bin", "python")
	}
	if len(modules) == 0 {
		modules = v.Imports
	}
	if out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); err != nil {
		tail := string(out)
		if len(tail) > 400 {
			tail = tail[len(tail)-400:]
		}
		how := "create it with bash " + v.Setup
		if v.Env != "" {
			how += " or set " + v.Env
		}
		return py, fmt.Errorf("%s cannot import %s (%v %s); %s", py, strings.Join(modules, ", "), err, strings.TrimSpace(tail), how)
	}
	return py, nil
}
