package main

import (
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// Declared layers split through the built-in catalogue (the generated code
// is byte-compiled, never run: no TensorFlow here); a factory model is refused.
func TestSplit(t *testing.T) {
	plugintest.SplitWithoutInspection(t, adapter(), spec.TensorFlow, "TensorFlow")
}
