package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/plugins/internal/plugintest"
	"github.com/hvdorg/hvd/sdk/plugin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	plugintest.CleanupRuntime()
	os.Exit(code)
}

// The generated hvd.tensorflow runs, under hvdrun -np 2, against a
// stand-in tensorflow module (testdata/faketf: eager only, tensors backed by
// numpy, no autodiff). This checks the generated glue — arguments,
// conversions, compression, IndexedSlices, broadcast_variables,
// DistributedGradientTape's averaging and grouping — through hvd.numpy and
// the engine; it does not check TensorFlow itself (graph mode, gradients of
// the collectives), which is not installable here.
func TestRuntimeOnStandInTensorFlow(t *testing.T) {
	set, err := adapter().Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	fake, _ := filepath.Abs("testdata/faketf")
	out := plugintest.RunUnderHvdrun(t, set, 2, "testdata/smoke.py", fake)
	if n := strings.Count(out, "hvd.tensorflow smoke ok"); n != 2 {
		t.Fatalf("%d ranks passed, want 2:\n%s", n, out)
	}
}
