package main

import (
	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/pypkg"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
	"github.com/hvdorg/hvd/plugins/internal/splitgen"
)

// adapter is the TensorFlow plugin: hvd.common, hvd.numpy, hvd.tensorflow
// (with hvd.tensorflow.keras) and hvd.keras (the same Keras API under
// Horovod's other name), real sources in python/hvd, plus the rendered
// hvd/tensorflow/_plugin.py (kind "package"), and the split
// generator for declared layers (kind "split"; a factory model is refused:
// only the PyTorch plugin imports and times a factory model).
func adapter() plugin.FrameworkAdapter {
	return splitgen.WithSplit(pkg(), spec.TensorFlow, nil, refused)
}

// refused says why a factory model cannot be split.
const refused = "TensorFlow models cannot be inspected by hvd-plugin-tensorflow (factory inspection runs only for PyTorch models)"

func pkg() pypkg.Adapter {
	return pypkg.Adapter{
		Name: "tensorflow",
		Framework: pyprobe.Framework{
			Module: "tensorflow",
			GPU:    "len(fw.config.list_physical_devices('GPU'))",
			// Keras 3 (TensorFlow 2.16 and later) has another optimizer API,
			// which hvd.tensorflow.keras does not wrap; 2.15.1 is what the
			// tests run (.ci/setup.d/30-frameworks.sh).
			Supported: pyprobe.MustRange(">=2.12,<2.16"),
		},
		// The same list feeds Describe and the generated code.
		DTypes:  []string{"uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64", "bool"},
		Modules: []string{"hvd/tensorflow", "hvd/keras"},
	}
}
