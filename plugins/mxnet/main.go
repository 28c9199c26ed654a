// Command hvd-plugin-mxnet is hvd's MXNet framework adapter, a go-plugin
// plugin that hvdgen starts (see package sdk/plugin):
//
//   - describe: framework "mxnet", module mxnet, supported >=1.6,<2;
//   - probe: imports mxnet in the given interpreter, reports its version
//     and the GPUs it sees;
//   - generate "package": the hvd Python package with hvd.common and
//     hvd.mxnet — Horovod's MXNet API (allreduce/allreduce_, grouped
//     variants, allgather, broadcast/broadcast_, alltoall, reducescatter on
//     mx.nd.NDArray, each with MXNet's `priority` argument, process sets,
//     DistributedOptimizer, DistributedTrainer, broadcast_parameters) on the
//     numpy-level core, rendered from templates/__init__.py.tmpl;
//   - generate "split": the model-parallel job for an hvd.yaml with declared
//     layers (codegen/split, golden-tested and byte-compiled there, never
//     run); a factory model is refused with a positioned error asking for
//     declared layers (inspecting it would mean running MXNet).
//
// What was checked: MXNet cannot be installed on the machines this was
// built on, so the generated module has never run under real MXNet. Its
// tests are a golden file (testdata/package.txtar, -update rewrites it),
// byte-compilation with python3 -m py_compile, and a smoke test under
// hvdrun -np 2 against a stand-in module (testdata/fakemx, numpy-backed),
// which checks the generated glue, not the framework; see docs/plugins.md.
package main

import "github.com/hvdorg/hvd/sdk/plugin"

func main() { plugin.Serve(adapter()) }
