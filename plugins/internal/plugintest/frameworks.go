package plugintest

import (
	"context"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/internal/venvs"
	"github.com/hvdorg/hvd/plugin/v1"
)

// TFPython is the interpreter of the TensorFlow venv ($HVD_TF_PYTHON, else
// the cached venv of .ci/setup.d/30-frameworks.sh: internal/venvs); it
// skips the test when it cannot import tensorflow.
func TFPython(t *testing.T) string { return FrameworkPython(t, venvs.TensorFlow) }

// MXNetPython is TFPython for MXNet ($HVD_MXNET_PYTHON).
func MXNetPython(t *testing.T) string { return FrameworkPython(t, venvs.MXNet) }

// FrameworkPython returns v's interpreter after checking that it imports
// its framework; otherwise the test is skipped with the reason and the
// command that creates the venv.
func FrameworkPython(t *testing.T, v venvs.Venv) string {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIPPED with -short: runs " + v.Imports[0] + " under hvdrun")
	}
	py, err := v.Python()
	if err != nil {
		t.Skipf("SKIPPED, NOT RUN: %v", err)
	}
	return py
}

// RunMarked generates a's package, runs script under hvdrun -np np with
// python (a framework venv's interpreter) and fails unless every rank
// printed "<marker> ok"; it returns the output.
func RunMarked(t *testing.T, a plugin.FrameworkAdapter, python string, np int, script, marker string) string {
	t.Helper()
	set, err := a.Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	out := RunUnderHvdrunWith(t, set, python, np, script)
	if n := strings.Count(out, marker+" ok"); n != np {
		t.Fatalf("%d ranks printed %q, want %d:\n%s", n, marker+" ok", np, out)
	}
	return out
}
