// Command hvd-plugin-tensorflow is hvd's TensorFlow framework adapter, a
// go-plugin plugin that hvdgen starts (see package plugin/v1):
//
//   - describe: framework "tensorflow", module tensorflow, supported
//     >=2.12,<2.16 (Keras 2; 2.15.1 is what the tests run);
//   - probe: imports tensorflow in the given interpreter, reports its
//     version and the GPUs tf.config sees; an unsupported version is refused;
//   - generate "package": the hvd Python package with hvd.common, hvd.numpy,
//     hvd.tensorflow (Horovod's TF2 API: collectives with their gradients,
//     process sets, DistributedGradientTape, DistributedOptimizer, the *_op
//     helpers), hvd.tensorflow.keras and hvd.keras (DistributedOptimizer,
//     callbacks, load_model): the sources in python/hvd/tensorflow and
//     python/hvd/keras, embedded, and the rendered hvd/tensorflow/_plugin.py
//     (versions and dtypes; see docs/frameworks.md);
//   - generate "split": the model-parallel job for an hvd.yaml with declared
//     layers (codegen/split); a factory model is refused with a positioned
//     error asking for declared layers.
//
// Tests: the golden file testdata/package.txtar (-update rewrites it),
// byte-compilation, and real_test.go: testdata/real/*.py under hvdrun -np 2
// and 3 with tensorflow-cpu from the venv .ci/setup.d/30-frameworks.sh
// creates (skipped, naming the reason, when it is missing).
package main

import "github.com/hvdorg/hvd/plugin/v1"

func main() { plugin.Serve(adapter()) }
