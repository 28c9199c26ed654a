package plugintest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Framework virtual environments: .ci/setup.d/30-frameworks.sh creates them
// under ${HVD_CACHE_DIR:-$HOME/.cache/hvd}, keyed by the pinned versions;
// the variables below point the tests elsewhere.
const (
	TFVersion    = "2.15.1"
	MXNetVersion = "1.9.1"
)

// TFPython is the interpreter of the TensorFlow venv ($HVD_TF_PYTHON, else
// the cached venv-tf-<TFVersion>); it skips the test when it cannot import
// tensorflow.
func TFPython(t *testing.T) string {
	return FrameworkPython(t, "HVD_TF_PYTHON", "venv-tf-"+TFVersion, "tensorflow")
}

// MXNetPython is TFPython for MXNet ($HVD_MXNET_PYTHON, venv-mxnet-<MXNetVersion>).
func MXNetPython(t *testing.T) string {
	return FrameworkPython(t, "HVD_MXNET_PYTHON", "venv-mxnet-"+MXNetVersion, "mxnet")
}

// CacheDir is where the framework venvs live: $HVD_CACHE_DIR, else ~/.cache/hvd.
func CacheDir() string {
	if d := os.Getenv("HVD_CACHE_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "hvd")
}

// FrameworkPython returns $env when set, else <CacheDir>/<venv>/bin/python,
// after checking that it imports module; otherwise the test is skipped with
// the reason and the command that creates the venv.
func FrameworkPython(t *testing.T, env, venv, module string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIPPED with -short: runs " + module + " under hvdrun")
	}
	py := os.Getenv(env)
	if py == "" {
		py = filepath.Join(CacheDir(), venv, "bin", "python")
	}
	if out, err := exec.Command(py, "-c", "import "+module).CombinedOutput(); err != nil {
		tail := string(out)
		if len(tail) > 400 {
			tail = tail[len(tail)-400:]
		}
		t.Skipf("SKIPPED, NOT RUN: %s cannot import %s (%v %s); create it with bash .ci/setup.d/30-frameworks.sh or set %s",
			py, module, err, tail, env)
	}
	return py
}
