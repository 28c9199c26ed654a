package main

import (
	"testing"

	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// What is checked without TensorFlow: the contract, the generated modules
// against testdata/package.txtar, and that every generated Python file
// byte-compiles. real_test.go runs them under a real TensorFlow.

func TestPackage(t *testing.T) {
	set := plugintest.Contract(t, adapter(), "tensorflow", "tensorflow")
	if _, ok := set.Lookup("hvd/torch/__init__.py"); ok {
		t.Error("the tensorflow package carries hvd.torch")
	}
	if _, ok := set.Lookup("hvd/numpy/__init__.py"); !ok {
		t.Error("the tensorflow package lacks hvd.numpy, its runtime path")
	}
	t.Run("Golden", func(t *testing.T) {
		plugintest.Golden(t, set, []string{"hvd/tensorflow/__init__.py",
			"hvd/tensorflow/keras/__init__.py", "hvd/tensorflow/keras/callbacks.py", "hvd/keras/__init__.py",
			"hvd/keras/callbacks.py"}, "package")
	})
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}
