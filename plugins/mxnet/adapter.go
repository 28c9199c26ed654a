package main

import (
	_ "embed"

	"github.com/hvdorg/hvd/plugins/internal/pypkg"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
)

//go:embed templates/__init__.py.tmpl
var initTemplate string

// adapter is the MXNet plugin: hvd.common, hvd.numpy and hvd.mxnet rendered
// from templates/__init__.py.tmpl.
func adapter() pypkg.Templated {
	return pypkg.Templated{
		Name: "mxnet",
		Framework: pyprobe.Framework{
			Module:    "mxnet",
			GPU:       "(fw.device if hasattr(fw, 'device') else fw.context).num_gpus()",
			Supported: pyprobe.MustRange(">=1.6,<2"),
		},
		// The same list feeds Describe and the generated code.
		DTypes:   []string{"uint8", "int8", "int32", "int64", "float16", "float32", "float64"},
		Template: initTemplate,
	}
}
