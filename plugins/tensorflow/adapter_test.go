package main

import (
	"testing"

	"github.com/hvdorg/hvd/plugins/internal/plugintest"
)

// What can be checked without tensorflow (not installable here): the contract, the
// generated module against testdata/package.txtar, and that every generated
// Python file byte-compiles. The module has never been imported under a real
// tensorflow.

func TestPackage(t *testing.T) {
	set := plugintest.Contract(t, adapter(), "tensorflow", "tensorflow")
	if _, ok := set.Lookup("hvd/torch/__init__.py"); ok {
		t.Error("the tensorflow package carries hvd.torch")
	}
	if _, ok := set.Lookup("hvd/numpy/__init__.py"); !ok {
		t.Error("the tensorflow package lacks hvd.numpy, its runtime path")
	}
	t.Run("Golden", func(t *testing.T) { plugintest.Golden(t, set, []string{"hvd/tensorflow/__init__.py"}, "package") })
	t.Run("PyCompile", func(t *testing.T) { plugintest.PyCompile(t, set) })
}
