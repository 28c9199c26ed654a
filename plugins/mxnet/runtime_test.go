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

// The generated hvd.mxnet runs, under hvdrun -np 2, against a stand-in
// mxnet module (testdata/fakemx: NDArrays backed by numpy). This checks
// the generated glue — argument handling, priority, conversions, in-place
// writes, the optimizer and trainer wrappers — through hvd.numpy and the
// engine; it does not check MXNet itself, which is not installable here.
func TestRuntimeOnStandInMXNet(t *testing.T) {
	set, err := adapter().Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	fake, _ := filepath.Abs("testdata/fakemx")
	out := plugintest.RunUnderHvdrun(t, set, 2, "testdata/smoke.py", fake)
	if n := strings.Count(out, "hvd.mxnet smoke ok"); n != 2 {
		t.Fatalf("%d ranks passed, want 2:\n%s", n, out)
	}
}
