// Command hvd-plugin-tensorflow is hvd's TensorFlow framework adapter, a
// go-plugin plugin that hvdgen starts (see package sdk/plugin):
//
//   - describe: framework "tensorflow", module tensorflow, supported >=2.6,<3;
//   - probe: imports tensorflow in the given interpreter, reports its
//     version and the GPUs tf.config sees;
//   - generate "package": the hvd Python package with hvd.common and
//     hvd.tensorflow — Horovod's TF2 API (allreduce, allgather, broadcast,
//     alltoall, reducescatter on tf.Tensor, process sets,
//     DistributedGradientTape, broadcast_variables) on the numpy-level
//     core, rendered from templates/__init__.py.tmpl;
//   - generate "split": the model-parallel job for an hvd.yaml with declared
//     layers (codegen/split, golden-tested and byte-compiled there, never
//     run); a factory model is refused with a positioned error asking for
//     declared layers (inspecting it would mean running TensorFlow).
//
// What was checked: TensorFlow cannot be installed on the machines this was
// built on, so the generated module has never run under real TensorFlow.
// Its tests are a golden file (testdata/package.txtar, -update rewrites it),
// byte-compilation with python3 -m py_compile, and a smoke test under
// hvdrun -np 2 against a stand-in module (testdata/faketf, numpy-backed),
// which checks the generated glue, not the framework; see docs/plugins.md.
package main

import "github.com/hvdorg/hvd/sdk/plugin"

func main() { plugin.Serve(adapter()) }
