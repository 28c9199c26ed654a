package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/plugins/internal/plugintest"
	"github.com/hvdorg/hvd/sdk/plugin"
)

// runReal runs a script of testdata/real under hvdrun -np np with the real
// TensorFlow venv and checks every rank printed "<marker> ok".
func TestMain(m *testing.M) {
	code := m.Run()
	plugintest.CleanupRuntime()
	os.Exit(code)
}

func runReal(t *testing.T, np int, script, marker string) string {
	t.Helper()
	py := plugintest.TFPython(t)
	set, err := adapter().Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	out := plugintest.RunUnderHvdrunWith(t, set, py, np, script)
	if n := strings.Count(out, marker+" ok"); n != np {
		t.Fatalf("%d ranks printed %q, want %d:\n%s", n, marker+" ok", np, out)
	}
	return out
}

// TestRealAPI runs testdata/real/api.py (every hvd.tensorflow function
// against expected values, gradients, a process set that excludes the last
// rank, errors, zero copy, DistributedGradientTape and DistributedOptimizer)
// under hvdrun -np 2 and -np 3 with TensorFlow from the venv.
func TestRealAPI(t *testing.T) {
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			runReal(t, np, "testdata/real/api.py", "hvd.tensorflow api")
		})
	}
}

// TestRealKeras runs testdata/real/fit.py (model.fit with
// DistributedOptimizer and the callbacks: identical weights on every rank, a
// falling loss; the learning-rate callbacks; load_model; dynamic process
// sets) under hvdrun -np 2 and -np 3; at np 2 the same processes run
// testdata/real/p2p.py (point-to-point, IndexedSlices).
func TestRealKeras(t *testing.T) {
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			out := runReal(t, np, "testdata/real/fit.py", "hvd.tensorflow.keras")
			if n := strings.Count(out, "hvd.tensorflow p2p ok"); np == 2 && n != 2 {
				t.Fatalf("%d ranks passed p2p.py, want 2:\n%s", n, out)
			}
		})
	}
}
