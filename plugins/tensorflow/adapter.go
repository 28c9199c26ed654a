package main

import (
	_ "embed"

	"github.com/hvdorg/hvd/plugins/internal/pypkg"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
)

//go:embed templates/__init__.py.tmpl
var initTemplate string

// adapter is the TensorFlow plugin: hvd.common, hvd.numpy and hvd.tensorflow
// rendered from templates/__init__.py.tmpl.
func adapter() pypkg.Templated {
	return pypkg.Templated{
		Name: "tensorflow",
		Framework: pyprobe.Framework{
			Module:    "tensorflow",
			GPU:       "len(fw.config.list_physical_devices('GPU'))",
			Supported: pyprobe.MustRange(">=2.6,<3"),
		},
		// The same list feeds Describe and the generated code.
		DTypes:   []string{"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool"},
		Template: initTemplate,
	}
}
