// Command hvd-plugin-pytorch is hvd's PyTorch framework adapter, a
// go-plugin plugin that hvdgen starts (see package plugin/v1):
//
//   - describe: framework "pytorch", module torch, supported >=1.13,<3;
//   - probe: runs the given interpreter, imports torch, reports its version
//     and torch.cuda availability;
//   - generate "package": the hvd Python package with hvd.common and
//     hvd.torch (the sources in python/hvd, embedded);
//   - generate "scaffold": a starter project (as `hvdgen init --framework
//     pytorch`);
//   - generate "split": the model-parallel job for an hvd.yaml (package
//     codegen/split). Declared layers come from split.Catalogue; a factory
//     model (model.factory) is imported, run on a sample batch and timed
//     layer by layer in the request's interpreter by inspect_model.py
//     (embedded), see inspect.go.
//
// `hvd-plugin-pytorch describe` prints the description as JSON.
package main

import "github.com/hvdorg/hvd/plugin/v1"

func main() { plugin.Serve(adapter{}) }
