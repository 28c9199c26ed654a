package main

import (
	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/pypkg"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
	"github.com/hvdorg/hvd/plugins/internal/splitgen"
)

// adapter is the MXNet plugin: hvd.common, hvd.numpy and hvd.mxnet (real
// sources in python/hvd/mxnet) plus the rendered hvd/mxnet/_plugin.py (kind
// "package"), and the split generator
// for declared layers (kind "split"; a factory model is refused: only the
// PyTorch plugin imports and times a factory model).
func adapter() plugin.FrameworkAdapter {
	return splitgen.WithSplit(pkg(), spec.MXNet, nil, refused)
}

// refused says why a factory model cannot be split.
const refused = "MXNet models cannot be inspected by hvd-plugin-mxnet (factory inspection runs only for PyTorch models)"

func pkg() pypkg.Adapter {
	return pypkg.Adapter{
		Name: "mxnet",
		Framework: pyprobe.Framework{
			Module: "mxnet",
			GPU:    "(fw.device if hasattr(fw, 'device') else fw.context).num_gpus()",
			// 1.9.1 is what the tests run (.ci/setup.d/30-frameworks.sh);
			// MXNet 2 changed the Gluon Trainer and optimizer APIs.
			Supported: pyprobe.MustRange(">=1.6,<2"),
		},
		// The same list feeds Describe and the generated code.
		DTypes:  []string{"uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool"},
		Modules: []string{"hvd/mxnet"},
	}
}
