# hvd-plugin-pytorch's factory inspection, run in the user's interpreter:
#
#   python -c <this file> '{"dir": ..., "factory": "mod:fn", "input_shape": [..] | null,
#                           "input_dtype": "int64" | null, "batch": 8, "repeats": 7}'
#
# It imports the factory's module (the spec's directory first on sys.path),
# calls the function with torch.manual_seed(0), and reports the model's
# layers: for every layer, in order, its name ("blocks.0"), class name, trainable parameter
# count, per-sample input and output shapes (a forward pass of a sample
# batch) and a measured cost: the median of timed forward+backward passes of
# that layer alone on the sample batch (at least `repeats`, up to 200 within
# 0.1 s), single-threaded, in microseconds per sample, to 2 significant
# digits. The answer is one line on stdout, MARK + JSON: {"layers": [...],
# ...} or {"error": {"kind": ..., "message": ...}}. Whatever the user's code
# prints is ignored.
#
# Accepted models:
#   - torch.nn.Sequential (or a subclass that keeps Sequential.forward): its children;
#   - torch.nn.ModuleList: its entries, run in order;
#   - any other nn.Module whose forward runs its children one after another, each on the previous
#     one's output, a ModuleList child counting as its entries (a GPT written as embed ->
#     for b in self.blocks: x = b(x) -> ln_f -> head). The layers are then the children in the
#     order forward runs them, checked on the sample batch in eval mode with hooks on every layer
#     (each runs once, on one tensor that is the previous one's output; forward returns the last
#     one's), and by running the layers alone, which must give forward's result.
# A nested Sequential is one layer. Refused, with the reason in the user's terms: the same module
# in two places or run twice, a parameter of the model itself (outside any child), a parameter
# shared by two layers (tied weights), computation between children (a residual around them, a
# reshape), an integer output of a layer (gradients cross the cuts).
#
# Input: floats of model.input_dtype (default: the parameters' dtype), or token ids when
# input_dtype is int32/int64 or the first layer is an nn.Embedding (ids below the first
# embedding's num_embeddings, reported as input_high).
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


def q(name):
    """A layer's name as errors quote it: 'blocks.0'."""
    return "'%s'" % name


def describe_layer(named, i):
    """'layer 2 (Linear)' for a Sequential's children, 'layer 3 (blocks.1: Block)' for named ones."""
    name, m = named[i]
    if name == str(i):
        return "layer %d (%s)" % (i, type(m).__name__)
    return "layer %d (%s: %s)" % (i, name, type(m).__name__)


def same(a, b):
    import torch
    return a is b or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                      and a.dtype == b.dtype and torch.equal(a, b))


def residual_source(t, out, calls, upto):
    """The call j < upto whose input, added to out, gives t (a residual connection around calls
    j..upto-1), or None."""
    import torch
    if not (isinstance(t, torch.Tensor) and isinstance(out, torch.Tensor) and t.is_floating_point()):
        return None
    for j in range(upto - 1, -1, -1):
        a = calls[j][1]
        if len(a) == 1 and isinstance(a[0], torch.Tensor) and a[0].is_floating_point() and a[0].shape == out.shape \
                and torch.allclose(t, out + a[0], rtol=1e-5, atol=1e-6):
            return j
    return None


def ids_hint(named, i, x):
    """A hint when layer i, the first, failed on float input but holds an nn.Embedding."""
    import torch.nn as nn
    if i != 0 or not x.is_floating_point() or not any(isinstance(e, nn.Embedding) for e in named[0][1].modules()):
        return ""
    return " (%s holds an nn.Embedding: if the model takes token ids, set model.input_dtype: int64)" % describe_layer(named, 0)


def trace_order(model, named, x, fname, kind, user, advice):
    """The layers in the order the model's forward runs them, after checking on the sample batch x
    (hooks on every layer) that forward is exactly that chain: every layer runs once, on one
    tensor, the previous layer's output (the first on the model's input), and forward returns the
    last layer's output. Otherwise a Fail that names the layer and says what forward does instead."""
    import torch
    index = {id(m): i for i, (_, m) in enumerate(named)}
    calls = []    # [layer index, positional args, output]
    running = []  # layer indices whose forward is running
    nested = []

    def pre(m, a):
        i = index[id(m)]
        if running and not nested:
            nested.append((i, running[-1]))
        running.append(i)
        calls.append([i, a, None])

    def post(m, a, out):
        i = running.pop()
        for c in reversed(calls):
            if c[0] == i and c[2] is None:
                c[2] = out
                break

    handles = []
    for _, m in named:
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    try:
        with torch.no_grad():
            whole = model(x)
    except BaseException as e:
        if running:
            i = running[0]
            raise Fail("shape", "running %s() (a %s) on a sample batch failed in %s: %s%s" % (
                fname, kind, describe_layer(named, i), describe_exc(e, user), ids_hint(named, i, x)), layer=i)
        raise Fail("not_sequential", "running %s() (a %s) on a sample batch failed: %s" % (
            fname, kind, describe_exc(e, user)))
    finally:
        for h in handles:
            h.remove()
    d = lambda i: describe_layer(named, i)
    if nested:
        i, j = nested[0]
        raise Fail("not_sequential", "%s runs inside %s (whose forward calls it): a layer of the pipeline is a direct "
                   "child of %s that its forward runs by itself; %s" % (d(i), d(j), kind, advice), layer=i)
    count = [0] * len(named)
    for c in calls:
        count[c[0]] += 1
    for i in range(len(named)):
        if count[i] == 0:
            raise Fail("not_sequential", "%s's forward never runs %s: every child module is a layer of the pipeline; "
                       "remove it from the model or run it in forward" % (kind, d(i)), layer=i)
        if count[i] > 1:
            raise Fail("not_sequential", "%s's forward runs %s %d times: the same child used twice cannot be cut into "
                       "stages (a stage owns its layers); give every use its own module" % (kind, d(i), count[i]), layer=i)
    prev = x
    for k, (i, a, out) in enumerate(calls):
        if len(a) != 1 or not isinstance(a[0], torch.Tensor):
            raise Fail("not_sequential", "%s's forward calls %s with %d arguments (%s): a pipeline stage hands one tensor "
                       "to the next; pass anything else (a mask, positions) inside the layers" % (
                           kind, d(i), len(a), ", ".join(type(v).__name__ for v in a)), layer=i)
        if not same(a[0], prev):
            j = residual_source(a[0], prev, calls, k) if k > 0 else None
            if j is not None:
                raise Fail("not_sequential", "%s's forward adds the input of %s to the output of %s before %s runs: a "
                           "residual connection around children, which hvdgen cannot place in a stage (it cuts between "
                           "children); put the residual inside one child module (a block whose forward returns "
                           "x + f(x))" % (kind, d(calls[j][0]), d(calls[k - 1][0]), d(i)), layer=i)
            if k == 0:
                raise Fail("not_sequential", "%s's forward computes something from its input before the first child it "
                           "runs, %s (that child's input is not the model's input): hvdgen cannot place that "
                           "computation in a stage; move it into a child module" % (kind, d(i)), layer=i)
            raise Fail("not_sequential", "%s's forward does not give %s the output of %s, the child it ran before: "
                       "it computes something between them (a residual, a reshape, an extra input) that hvdgen cannot "
                       "place in a stage; move that computation into a child module" % (kind, d(i), d(calls[k - 1][0])),
                       layer=i)
        prev = out
    last = calls[-1][0]
    if not isinstance(whole, torch.Tensor):
        raise Fail("not_sequential", "%s's forward returns a %s, not one tensor: the last stage's output is one tensor "
                   "that the loss takes" % (kind, type(whole).__name__))
    if not same(whole, prev):
        j = residual_source(whole, prev, calls, len(calls))
        if j is not None:
            raise Fail("not_sequential", "%s's forward adds the input of %s to the output of %s, its last child: a "
                       "residual connection around children, which hvdgen cannot place in a stage (it cuts between "
                       "children); put the residual inside one child module (a block whose forward returns x + f(x))" % (
                           kind, d(calls[j][0]), d(last)))
        raise Fail("not_sequential", "%s's forward does not return the output of its last child, %s: it computes "
                   "something after it that hvdgen cannot place in a stage; move that computation into a child "
                   "module" % (kind, d(last)))
    return [named[c[0]] for c in calls]


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

    advice = ("return an nn.Sequential of the layers, or a module whose forward runs its children (a ModuleList's "
              "entries one by one) one after another, each taking the previous one's output")
    if not isinstance(model, nn.Module):
        raise Fail("not_sequential", "%s() returned %s, not a torch.nn.Module: %s" % (fname, type(model).__name__, advice))
    kind = type(model).__name__
    is_seq = isinstance(model, nn.Sequential) and type(model).forward is nn.Sequential.forward
    is_list = isinstance(model, nn.ModuleList)
    # The candidate layers, (name, module): the model's direct children, a ModuleList child expanded
    # into its entries ("blocks.0", "blocks.1", ...). A nested Sequential is one layer.
    named = []
    for name, m in model._modules.items():
        if m is None:
            continue
        if isinstance(m, nn.ModuleList) and not is_seq and not is_list:
            named += [("%s.%s" % (name, k), e) for k, e in m._modules.items() if e is not None]
        else:
            named.append((name, m))
    if not named:
        raise Fail("not_sequential", "%s() returned a %s with no child modules, nothing to split: %s" % (fname, kind, advice))
    seen = {}
    for i, (name, m) in enumerate(named):
        if id(m) in seen:
            j = seen[id(m)]
            raise Fail("not_sequential", "%s and %s are the same %s object (layers %d and %d): every layer must be its own "
                       "module (a pipeline stage owns its layers); create a separate %s for each place" % (
                           q(named[j][0]), q(name), type(m).__name__, j, i, type(m).__name__), layer=i)
        seen[id(m)] = i
    # Parameters the stages could not own: one on the model itself, or one shared by two layers.
    own = [(n, p) for n, p in model._parameters.items() if p is not None]
    if own:
        n, p = own[0]
        raise Fail("not_sequential", "%s is a parameter of %s itself (shape %s), outside any child module, so no pipeline "
                   "stage can own it: move it into a child module that forward runs in line with the others (e.g. a "
                   "position embedding as an nn.Embedding inside the module that embeds the tokens, whose forward adds "
                   "the two)" % (q(n), kind, shape_str(p.shape)))
    owner = {}
    for i, (name, m) in enumerate(named):
        for pn, p in m.named_parameters():
            if id(p) in owner and owner[id(p)][0] != i:
                j, qn = owner[id(p)]
                raise Fail("not_sequential", "%s and %s share one parameter (%s is %s, tied weights): a pipeline stage owns "
                           "its layers' parameters, so a parameter cannot be in two layers; untie them (give each layer "
                           "its own), or use model.gpt, whose generated job mirrors a tied output layer" % (
                               q(named[j][0]), q(name), q(named[j][0] + "." + qn), q(name + "." + pn)), layer=i)
            owner.setdefault(id(p), (i, pn))

    first = named[0][1]
    params = [p for p in model.parameters()]
    dtype = params[0].dtype if params and params[0].is_floating_point() else torch.float32
    want = args.get("input_dtype")  # model.input_dtype, or None
    ids = want in ("int32", "int64") or (want is None and isinstance(first, nn.Embedding))
    shape = args.get("input_shape")
    shape_from = "model.input_shape"
    if shape is None:
        if isinstance(first, nn.Linear) and not ids:
            shape, shape_from = [first.in_features], "layer 0's in_features"
        else:
            raise Fail("input_shape", "model.input_shape is needed: layer 0 (%s) does not tell the shape of its input "
                       "(only a first Linear's in_features does); add input_shape (one sample's shape without the "
                       "batch dimension, e.g. [3, 32, 32], or [32] for sequences of 32 token ids) under model in "
                       "hvd.yaml" % type(first).__name__)
    high = None
    if ids:
        # Token ids: as many as the first layer's first nn.Embedding has rows.
        emb = next((e for e in first.modules() if isinstance(e, nn.Embedding)), None)
        if emb is None:
            raise Fail("input_dtype", "model.input_dtype is %s (ids), but layer 0 (%s) holds no nn.Embedding to say how "
                       "many ids there are: the first layer must embed the ids" % (want, type(first).__name__))
        high = emb.num_embeddings
        x = torch.randint(0, high, [batch] + list(shape), dtype=getattr(torch, want or "int64"))
    else:
        if want is not None:
            dtype = getattr(torch, want)
        x = torch.randn([batch] + list(shape), dtype=dtype)

    model.eval()
    if not is_seq and not is_list:
        named = trace_order(model, named, x, fname, kind, user, advice)
    layers = [m for _, m in named]

    # Shapes: run the sample batch through the layers one after another.
    ins, outs, samples = [], [], []
    cur = x
    with torch.no_grad():
        for i, m in enumerate(layers):
            name = describe_layer(named, i)
            try:
                y = m(cur)
            except BaseException as e:
                if i == 0:
                    what = "an input of per-sample shape %s (%s)" % (shape_str(shape), shape_from)
                else:
                    what = "the output of %s, per-sample shape %s" % (describe_layer(named, i - 1), shape_str(cur.shape[1:]))
                raise Fail("shape", "%s cannot take %s: %s%s" % (name, what, describe_exc(e, user), ids_hint(named, i, x)),
                           layer=i)
            if not isinstance(y, torch.Tensor):
                raise Fail("output", "%s returns a %s, not one tensor: a pipeline stage boundary carries one "
                           "tensor; wrap the layer in a module that returns one" % (name, type(y).__name__), layer=i)
            if y.dim() == 0 or y.shape[0] != batch:
                raise Fail("output", "%s changes the batch dimension (input batch %d, output shape %s): "
                           "every layer must keep dimension 0 as the batch" % (name, batch, shape_str(y.shape)), layer=i)
            if not y.is_floating_point():
                raise Fail("output", "%s outputs %s values: gradients flow back across the cuts between stages, so "
                           "every layer's output must be floating point (only the model's input may be ids)" % (
                               name, str(y.dtype).replace("torch.", "")), layer=i)
            ins.append(list(cur.shape[1:]))
            outs.append(list(y.shape[1:]))
            samples.append(cur)
            cur = y
        if not is_seq and not is_list:
            # The trace showed a chain; running the layers alone must also give forward's result
            # (a layer that reads something besides its one input, e.g. a keyword argument, does not).
            whole = model(x)
            if not (isinstance(whole, torch.Tensor) and whole.shape == cur.shape and torch.allclose(whole, cur, rtol=1e-4, atol=1e-5)):
                raise Fail("not_sequential", "%s() returned a %s whose forward is not its %d children run in order: each "
                           "takes the previous one's output, but running them one after another on a sample batch "
                           "gives another result than forward (does forward pass a child more than its input, e.g. "
                           "a keyword argument or a mask?): %s" % (fname, kind, len(layers), advice))

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
            raise Fail("backward", "%s: forward+backward on the sample batch failed: %s" % (
                describe_layer(named, i), describe_exc(e, user)), layer=i)
        costs.append(statistics.median(times) / batch * 1e6)

    out = {
        "model": kind,
        "input_shape": list(shape),
        "input_from": shape_from,
        "dtype": str(dtype).replace("torch.", ""),
        "input_dtype": str(x.dtype).replace("torch.", ""),
        "input_high": high,
        "batch": batch,
        "repeats": repeats,
        "cost_unit": "microseconds per sample (median of timed forward+backward passes, 1 thread, 2 significant digits)",
        "torch": torch.__version__,
        "layers": [],
    }
    for i, m in enumerate(layers):
        out["layers"].append({
            "type": type(m).__name__,
            "name": named[i][0],
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
