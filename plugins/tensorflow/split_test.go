package main

import (
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// Declared layers split through the built-in catalogue (the generated code
// byte-compiles; TestSplitRunsLikeReference runs it); a factory model is refused.
func TestSplit(t *testing.T) {
	plugintest.SplitWithoutInspection(t, adapter(), spec.TensorFlow, "TensorFlow")
}

// The generated Keras job runs for real under hvdrun with TensorFlow from
// the venv and matches its single-process reference (float64, 20 steps,
// every parameter and loss to 1e-5).
func TestSplitRunsLikeReference(t *testing.T) {
	py := plugintest.TFPython(t)
	// One layout (TensorFlow's start-up makes each run ~15 s): pipeline and
	// data parallelism at once; the MXNet job also runs 3x1 GPipe.
	t.Run("2x2-1f1b", func(t *testing.T) {
		plugintest.SplitRunsLikeReference(t, adapter(), spec.TensorFlow, py, 2, 2, spec.OneFOneB)
	})
}
