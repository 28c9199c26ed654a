# hvd-plugin-pytorch's factory inspection, run in the user's interpreter:
#
#   python -c <this file> '{"dir": ..., "factory": "mod:fn", "input_shape": [..] | null,
#                           "batch": 8, "repeats": 7}'
#
# It imports the factory's module (the spec's directory first on sys.path),
# calls the function with torch.manual_seed(0), and reports the model's
# layers: for every child, in order, its class name, trainable parameter
# count, per-sample input and output shapes (a forward pass of a sample
# batch) and a measured cost: the median of timed forward+backward passes of
# that layer alone on the sample batch (at least `repeats`, up to 200 within
# 0.1 s), single-threaded, in microseconds per sample, to 2 significant
# digits. The answer is one line on stdout, MARK + JSON: {"layers": [...],
# ...} or {"error": {"kind": ..., "message": ...}}. Whatever the user's code
# prints is ignored.
#
# Accepted models:
#   - torch.nn.Sequential (or a subclass that keeps Sequential.forward);
#   - torch.nn.ModuleList (its entries are run in order);
#   - any other nn.Module with child modules whose output, on the sample
#     batch in eval mode, equals running its children one after another.
# The layers are the model's direct children (a nested Sequential is one
# layer); the same module object may not appear twice.
import inspect
import json
import os
import statistics
import sys
import time
import traceback

MARK = "HVD-INSPECT "


def reply(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


class Fail(Exception):
    def __init__(self, kind, message, layer=None):
        super().__init__(message)
        self.kind, self.message, self.layer = kind, message, layer


def describe_exc(e, user_files=()):
    """'Type: message (file.py:line)' with the innermost frame in the user's code."""
    msg = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
    where = None
    if isinstance(e, SyntaxError):
        pass  # its message says file and line
    else:
        for fr in traceback.extract_tb(e.__traceback__):
            if fr.filename.startswith("<"):
                continue  # <string> (this script), <frozen importlib...>
            f = os.path.abspath(fr.filename)
            if any(f == u or f.startswith(u + os.sep) for u in user_files):
                where = "%s:%s" % (os.path.relpath(f, user_files[0]) if user_files else fr.filename, fr.lineno)
    return msg + (" (at %s)" % where if where else "")


def shape_str(s):
    return "[" + ", ".join(str(d) for d in s) + "]"


def main():
    args = json.loads(sys.argv[1])
    spec_dir = os.path.abspath(args["dir"])
    factory = args["factory"]
    batch = int(args.get("batch") or 8)
    repeats = int(args.get("repeats") or 7)
    sys.path.insert(0, spec_dir)
    user = (spec_dir,)

    try:
        import torch
        import torch.nn as nn
    except BaseException as e:
        raise Fail("torch", "import torch failed: %s" % describe_exc(e))
    torch.set_num_threads(1)

    modname, fname = factory.split(":", 1)
    try:
        import importlib
        mod = importlib.import_module(modname)
    except BaseException as e:
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name and modname.split(".")[0] == e.name.split(".")[0]:
            hint = "; looked in %s and the interpreter's path (%s)" % (spec_dir, sys.executable)
        raise Fail("import", "cannot import module %s: %s%s" % (modname, describe_exc(e, user), hint))
    fn = getattr(mod, fname, None)
    where = getattr(mod, "__file__", None) or modname
    if fn is None:
        have = sorted(n for n, v in vars(mod).items() if inspect.isfunction(v) and not n.startswith("_")
                      and v.__module__ == mod.__name__)
        raise Fail("missing", "module %s (%s) has no function %s%s" % (
            modname, where, fname, "; it defines: " + ", ".join(have) if have else ""))
    if not callable(fn):
        raise Fail("missing", "%s in module %s (%s) is a %s, not a function" % (fname, modname, where, type(fn).__name__))
    torch.manual_seed(0)
    try:
        model = fn()
    except BaseException as e:
        raise Fail("call", "calling %s() raised %s" % (fname, describe_exc(e, user)))

    advice = "return an nn.Sequential of the layers (hvdgen splits its children in order)"
    if not isinstance(model, nn.Module):
        raise Fail("not_sequential", "%s() returned %s, not a torch.nn.Module: %s" % (fname, type(model).__name__, advice))
    layers = [m for m in model._modules.values() if m is not None]
    kind = type(model).__name__
    if not layers:
        raise Fail("not_sequential", "%s() returned a %s with no child modules, nothing to split: %s" % (fname, kind, advice))
    is_seq = isinstance(model, nn.Sequential) and type(model).forward is nn.Sequential.forward
    is_list = isinstance(model, nn.ModuleList)
    seen = {}
    for i, m in enumerate(layers):
        if id(m) in seen:
            j = seen[id(m)]
            raise Fail("not_sequential", "layers %d and %d are the same %s object: every layer must be its own module "
                       "(a pipeline stage owns its layers); create a separate %s for each place" % (
                           j, i, type(m).__name__, type(m).__name__), layer=i)
        seen[id(m)] = i

    first = layers[0]
    params = [p for p in model.parameters()]
    dtype = params[0].dtype if params and params[0].is_floating_point() else torch.float32
    shape = args.get("input_shape")
    shape_from = "model.input_shape"
    if shape is None:
        if isinstance(first, nn.Linear):
            shape, shape_from = [first.in_features], "layer 0's in_features"
        else:
            raise Fail("input_shape", "model.input_shape is needed: layer 0 (%s) does not tell the shape of its input "
                       "(only a first Linear's in_features does); add input_shape (one sample's shape without the "
                       "batch dimension, e.g. [3, 32, 32]) under model in hvd.yaml" % type(first).__name__)
    if isinstance(first, nn.Embedding):
        x = torch.randint(0, first.num_embeddings, [batch] + list(shape))
    else:
        x = torch.randn([batch] + list(shape), dtype=dtype)

    # Shapes: run the sample batch through the layers one after another.
    model.eval()
    ins, outs, samples = [], [], []
    cur = x
    with torch.no_grad():
        for i, m in enumerate(layers):
            name = type(m).__name__
            try:
                y = m(cur)
            except BaseException as e:
                if i == 0:
                    what = "an input of per-sample shape %s (%s)" % (shape_str(shape), shape_from)
                else:
                    what = "the output of layer %d (%s), per-sample shape %s" % (i - 1, type(layers[i - 1]).__name__, shape_str(cur.shape[1:]))
                raise Fail("shape", "layer %d (%s) cannot take %s: %s" % (i, name, what, describe_exc(e, user)), layer=i)
            if not isinstance(y, torch.Tensor):
                raise Fail("output", "layer %d (%s) returns a %s, not one tensor: a pipeline stage boundary carries one "
                           "tensor; wrap the layer in a module that returns one" % (i, name, type(y).__name__), layer=i)
            if y.dim() == 0 or y.shape[0] != batch:
                raise Fail("output", "layer %d (%s) changes the batch dimension (input batch %d, output shape %s): "
                           "every layer must keep dimension 0 as the batch" % (i, name, batch, shape_str(y.shape)), layer=i)
            ins.append(list(cur.shape[1:]))
            outs.append(list(y.shape[1:]))
            samples.append(cur)
            cur = y
        if not is_seq and not is_list:
            # Not a Sequential: accept it only if its forward is its children
            # run in order.
            try:
                whole = model(x)
            except BaseException as e:
                raise Fail("not_sequential", "%s() returned a %s (not an nn.Sequential), and running it on the sample batch "
                           "failed: %s; %s" % (fname, kind, describe_exc(e, user), advice))
            if not (isinstance(whole, torch.Tensor) and whole.shape == cur.shape and torch.allclose(whole, cur, rtol=1e-4, atol=1e-5)):
                raise Fail("not_sequential", "%s() returned a %s, not an nn.Sequential, and its forward is not its %d children "
                           "run in order (on a sample batch its output differs from theirs): %s" % (
                               fname, kind, len(layers), advice))

    # Costs: forward+backward of each layer alone, in training mode.
    model.train()
    costs = []
    for i, m in enumerate(layers):
        xi = samples[i].detach()
        if xi.is_floating_point():
            xi.requires_grad_(True)

        def step():
            y = m(xi)
            if y.requires_grad:
                y.backward(torch.ones_like(y))
            m.zero_grad(set_to_none=True)
            xi.grad = None

        try:
            for _ in range(3):
                step()  # warm-up: allocator, lazy initialisation
            # At least `repeats` timed passes; cheap layers get more (up to
            # 200, within 0.1 s), which steadies their median.
            times, spent = [], 0.0
            while len(times) < repeats or (spent < 0.1 and len(times) < 200):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
                spent += times[-1]
        except BaseException as e:
            raise Fail("backward", "layer %d (%s): forward+backward on the sample batch failed: %s" % (
                i, type(m).__name__, describe_exc(e, user)), layer=i)
        costs.append(statistics.median(times) / batch * 1e6)

    out = {
        "model": kind,
        "input_shape": list(shape),
        "input_from": shape_from,
        "dtype": str(dtype).replace("torch.", ""),
        "batch": batch,
        "repeats": repeats,
        "cost_unit": "microseconds per sample (median of timed forward+backward passes, 1 thread, 2 significant digits)",
        "torch": torch.__version__,
        "layers": [],
    }
    for i, m in enumerate(layers):
        out["layers"].append({
            "type": type(m).__name__,
            "params": sum(p.numel() for p in m.parameters() if p.requires_grad),
            "in": ins[i],
            "out": outs[i],
            "cost": float("%.2g" % costs[i]),
        })
    return out


if __name__ == "__main__":
    try:
        reply(main())
    except Fail as f:
        reply({"error": {"kind": f.kind, "message": f.message, "layer": f.layer}})
    except BaseException as e:
        reply({"error": {"kind": "internal", "message": "the inspection failed: " + "".join(
            traceback.format_exception_only(type(e), e)).strip()}})
