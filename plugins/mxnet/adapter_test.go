package main

import (
	"testing"

	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// What is checked without MXNet: the contract, the file list and the
// rendered hvd/mxnet/_plugin.py against testdata/package.txtar (the sources
// are python/hvd's, written as they are: pypkg's tests), and that every generated Python file
// byte-compiles. real_test.go runs it under a real MXNet.

func TestPackage(t *testing.T) {
	set := plugintest.Contract(t, adapter(), "mxnet", "mxnet")
	if _, ok := set.Lookup("hvd/torch/__init__.py"); ok {
		t.Error("the mxnet package carries hvd.torch")
	}
	if _, ok := set.Lookup("hvd/numpy/__init__.py"); !ok {
		t.Error("the mxnet package lacks hvd.numpy, its runtime path")
	}
	t.Run("Golden", func(t *testing.T) { plugintest.Golden(t, set, []string{"hvd/mxnet/_plugin.py"}, "package") })
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}
