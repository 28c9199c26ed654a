// Command hvd-plugin-mxnet is hvd's MXNet framework adapter, a go-plugin
// plugin that hvdgen starts (see package plugin/v1):
//
//   - describe: framework "mxnet", module mxnet, supported >=1.6,<2;
//   - probe: imports mxnet in the given interpreter, reports its version
//     and the GPUs it sees;
//   - generate "package": the hvd Python package with hvd.common and
//     hvd.mxnet — Horovod's MXNet API (allreduce/allreduce_, grouped
//     variants, allgather, broadcast/broadcast_, alltoall, reducescatter on
//     mx.nd.NDArray, each with MXNet's `priority` argument, process sets,
//     DistributedOptimizer, DistributedTrainer, broadcast_parameters) on the
//     numpy-level core with zero copy on the CPU (see docs/frameworks.md):
//     the sources in python/hvd/mxnet, embedded, and the rendered
//     hvd/mxnet/_plugin.py (versions and dtypes);
//   - generate "split": the model-parallel job for an hvd.yaml with declared
//     layers (codegen/split); a factory model is refused with a positioned
//     error asking for declared layers.
//
// Tests: the golden file testdata/package.txtar (-update rewrites it),
// byte-compilation, and real_test.go: testdata/real/*.py under hvdrun -np 2
// and 3 with mxnet 1.9.1 from the venv .ci/setup.d/30-frameworks.sh creates
// (skipped, naming the reason, when it is missing).
package main

import "github.com/hvdorg/hvd/plugin/v1"

func main() { plugin.Serve(adapter()) }
