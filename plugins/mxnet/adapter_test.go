package main

import (
	"testing"

	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// What is checked without MXNet: the contract, the generated module against
// testdata/package.txtar, and that every generated Python file
// byte-compiles. real_test.go runs it under a real MXNet.

func TestPackage(t *testing.T) {
	set := plugintest.Contract(t, adapter(), "mxnet", "mxnet")
	if _, ok := set.Lookup("hvd/torch/__init__.py"); ok {
		t.Error("the mxnet package carries hvd.torch")
	}
	if _, ok := set.Lookup("hvd/numpy/__init__.py"); !ok {
		t.Error("the mxnet package lacks hvd.numpy, its runtime path")
	}
	t.Run("Golden", func(t *testing.T) { plugintest.Golden(t, set, []string{"hvd/mxnet/__init__.py"}, "package") })
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}
