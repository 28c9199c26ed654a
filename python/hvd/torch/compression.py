"""Gradient compression (horovod.torch.compression), plus hvd's additions
(issue 18): bf16, top-k sparsification with error feedback, and an
adaptive policy that chooses a compressor per tensor.

Horovod's compressors (none, fp16) and bf16 are casts: compress() gives
the tensor to allreduce, decompress() restores it. Top-k is not a cast:
ranks keep different elements, so it is reduced as two allgathers (the
indices and the values of each rank's k largest accumulated elements),
summed into a dense tensor; what a rank did not send this step stays in
its residual and is added to the next step's gradient (error feedback), so
nothing is lost, only delayed. It runs through DistributedOptimizer (which
knows the parameter's name across steps), not through hvd.allreduce.

The adaptive policy picks per tensor by size, name pattern or a callable:

    hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                             compression=hvd.Compression.adaptive())

is none for tensors under 1024 elements and for biases and norms, fp16 up to
65536 elements, top-k (1 %) above; ``adaptive(rules=[('*.bias', none),
(lambda name, t: t.numel() > 1e6, topk(0.001))], default=fp16)`` chooses
explicitly (the first rule that matches wins).

``Compression.measured()`` decides from the gradients themselves: it
measures, over the first steps, the error each candidate would make on each
tensor, and picks per tensor the most aggressive candidate within its bound
(MeasuredCompression).
"""
import fnmatch

import torch

from hvd.common.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Casts floating tensors to float16 for the collective and back after."""

    @staticmethod
    def compress(tensor):
        tensor_compressed = tensor
        if tensor.dtype.is_floating_point:
            tensor_compressed = tensor.type(torch.float16)
        return tensor_compressed, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        tensor_decompressed = tensor
        dtype = ctx
        if dtype.is_floating_point:
            tensor_decompressed = tensor.type(dtype)
        return tensor_decompressed


class BF16Compressor(Compressor):
    """Casts floating tensors to bfloat16 (float32's range, 8 bits of
    mantissa) for the collective and back after."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.bfloat16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx.is_floating_point else tensor


class TopKCompressor(Compressor):
    """Top-k sparsification with error feedback: each step a rank sends its
    k = ceil(ratio · numel) largest elements (by magnitude) of gradient +
    residual, as indices and values through two allgathers, and keeps the
    rest as the next step's residual. Floating tensors only; Sum or Average.
    One instance keeps the residuals of every tensor it compresses, by name."""

    sparse = True

    def __init__(self, ratio=0.01):
        if not 0 < ratio <= 1:
            raise ValueError('hvd: top-k ratio must be in (0, 1], not %r' % (ratio,))
        self.ratio = float(ratio)
        self.residuals = {}

    def __repr__(self):
        return 'Compression.topk(%g)' % self.ratio

    def k(self, numel):
        return max(1, min(numel, int(-(-numel * self.ratio // 1))))

    def wire_bytes(self, tensor):
        """Bytes this rank sends for tensor (int32 indices and values)."""
        return self.k(tensor.numel()) * (4 + tensor.element_size())

    def compress(self, tensor):
        raise NotImplementedError('hvd: top-k compression keeps a residual per tensor across steps: use it through '
                                  'DistributedOptimizer(compression=...), not hvd.allreduce')

    decompress = compress

    def reduce_async(self, name, tensor, op, process_set, priority=0):
        """Starts the reduction of tensor (named name on every rank); returns
        a callable that waits and returns the reduced dense tensor."""
        from hvd.common.handles import synchronize
        from hvd.common.ops import Average, Sum
        from hvd.torch.tensors import collectives
        if op not in (Average, Sum):
            raise ValueError('hvd: top-k compression supports Average and Sum, not op %r' % (op,))
        if not tensor.dtype.is_floating_point:
            raise ValueError('hvd: top-k compression needs a floating tensor, not %s' % tensor.dtype)
        flat = tensor.detach().reshape(-1)
        res = self.residuals.get(name)
        acc = flat + res if res is not None and res.shape == flat.shape else flat.clone()
        k = self.k(acc.numel())
        idx = torch.topk(acc.abs(), k, sorted=False).indices
        vals = acc[idx]
        acc[idx] = 0
        self.residuals[name] = acc
        hi = collectives.allgather_async(idx.to(torch.int32), '%s.topk.idx' % name, process_set, priority)
        hv = collectives.allgather_async(vals, '%s.topk.val' % name, process_set, priority)
        shape, numel, dtype = tensor.shape, flat.numel(), tensor.dtype
        n = process_set.size() if process_set.size() is not None else 1

        def wait():
            out = torch.zeros(numel, dtype=dtype)
            out.index_add_(0, synchronize(hi).to(torch.int64), synchronize(hv))
            if op == Average:
                out /= n
            return out.view(shape)
        return wait


class AdaptiveCompression:
    """A policy choosing a compressor per tensor (see the module doc):
    rules are (matcher, compressor) pairs tried in order — a matcher is a
    glob on the tensor's name, or a callable (name, tensor) -> bool — and
    default applies when none matches. select() is called by
    DistributedOptimizer for every gradient, by parameter name."""

    def __init__(self, rules=None, default=None):
        if rules is None:
            rules = [(lambda name, t: t.numel() < 1024, NoneCompressor),
                     ('*bias', NoneCompressor), ('*norm*', NoneCompressor), ('*bn*', NoneCompressor),
                     (lambda name, t: t.numel() <= 65536, FP16Compressor)]
            default = TopKCompressor(0.01) if default is None else default
        self.rules = []
        for matcher, comp in rules:
            if not (isinstance(matcher, str) or callable(matcher)):
                raise ValueError('hvd: an adaptive compression rule matches a name pattern (str) or a callable '
                                 '(name, tensor) -> bool, not %r' % (matcher,))
            self.rules.append((matcher, comp))
        self.default = NoneCompressor if default is None else default

    def select(self, name, tensor):
        for matcher, comp in self.rules:
            if (fnmatch.fnmatchcase(name or '', matcher) if isinstance(matcher, str) else matcher(name, tensor)):
                return comp
        return self.default

    def compress(self, tensor):
        raise NotImplementedError('hvd: adaptive compression chooses per named gradient: use it through '
                                  'DistributedOptimizer(compression=...)')

    decompress = compress


class MeasuredCompression:
    """A policy choosing a compressor per tensor from measured sensitivity.

    For its first ``steps`` optimizer steps every gradient is reduced
    uncompressed, and for each candidate the policy measures the relative
    error the candidate would have made on it, ||g - c(g)|| / ||g|| (for
    top-k: the part of the gradient a step would leave in the residual).
    At the end of the last measured step the errors are averaged over the
    process set (one allreduce, so every rank decides alike) and each
    tensor gets the first candidate, in the order given (most aggressive
    first), whose mean error is within its bound; a tensor no candidate
    suits stays uncompressed. ``decisions`` then maps names to compressors
    (a name absent from it: uncompressed).

    candidates: (compressor, max relative error) pairs; the default is
    top-k 1 % within 0.5 (gradients whose largest 1 % carry three quarters
    of their energy), then bf16 within 0.01, else none."""

    def __init__(self, candidates=None, steps=5):
        if candidates is None:
            candidates = [(TopKCompressor(0.01), 0.5), (BF16Compressor, 0.01)]
        self.candidates = []
        for comp, bound in candidates:
            if not 0 <= float(bound):
                raise ValueError('hvd: a measured compression bound is a relative error >= 0, not %r' % (bound,))
            self.candidates.append((comp, float(bound)))
        if int(steps) < 1:
            raise ValueError('hvd: measured compression needs at least one measured step, not %r' % (steps,))
        self.steps = int(steps)
        self.step = 0
        self.errors = {}      # name -> [sum of relative errors per candidate]
        self.decisions = None  # name -> compressor, once decided

    def __repr__(self):
        return 'Compression.measured(%r, steps=%d)' % (self.candidates, self.steps)

    @staticmethod
    def relative_error(comp, tensor):
        """The relative error comp makes on tensor in one step."""
        g = tensor.detach().reshape(-1).to(torch.float64)
        norm = g.norm()
        if norm == 0:
            return 0.0
        if getattr(comp, 'sparse', False):
            k = comp.k(g.numel())
            sq = g * g
            left = sq.sum() - torch.topk(sq, k, sorted=False).values.sum()
            return float(left.clamp(min=0).sqrt() / norm)
        c, ctx = comp.compress(tensor.detach())
        return float((g - comp.decompress(c, ctx).reshape(-1).to(torch.float64)).norm() / norm)

    def select(self, name, tensor):
        if self.decisions is not None:
            return self.decisions.get(name, NoneCompressor)
        if not tensor.dtype.is_floating_point:
            return NoneCompressor
        errs = [self.relative_error(c, tensor) for c, _ in self.candidates]
        acc = self.errors.setdefault(name, [0.0] * len(errs))
        for i, e in enumerate(errs):
            acc[i] += e
        return NoneCompressor

    def end_step(self, process_set):
        """Called by DistributedOptimizer once per step on every rank of the
        set; decides after the last measured step."""
        if self.decisions is not None:
            return
        self.step += 1
        if self.step < self.steps:
            return
        from hvd.torch.tensors import collectives  # (not hvd.torch.functions: an import cycle)
        # The names measured may differ between ranks only by gradients some
        # rank never saw; every rank sums what it measured, by name.
        mine = {n: [e / self.steps for e in v] for n, v in self.errors.items()}
        every = collectives.allgather_object(mine, 'hvd.compression.measured', process_set)
        names = sorted(set().union(*every))
        self.decisions = {}
        for n in names:
            rows = [m[n] for m in every if n in m]
            mean = [sum(r[i] for r in rows) / len(rows) for i in range(len(self.candidates))]
            for (comp, bound), e in zip(self.candidates, mean):
                if e <= bound:
                    self.decisions[n] = comp
                    break
        self.errors = {}

    def compress(self, tensor):
        raise NotImplementedError('hvd: measured compression chooses per named gradient: use it through '
                                  'DistributedOptimizer(compression=...)')

    decompress = compress


class Compression:
    """Optional gradient compression algorithms used during allreduce."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def topk(ratio=0.01):
        """Top-k with error feedback (DistributedOptimizer only)."""
        return TopKCompressor(ratio)

    @staticmethod
    def adaptive(rules=None, default=None):
        """A per-tensor policy (DistributedOptimizer only); see AdaptiveCompression."""
        return AdaptiveCompression(rules, default)

    @staticmethod
    def measured(candidates=None, steps=5):
        """A per-tensor policy from measured sensitivity (DistributedOptimizer only); see MeasuredCompression."""
        return MeasuredCompression(candidates, steps)


def select(compression, name, tensor):
    """The compressor compression uses for this named tensor."""
    if isinstance(compression, (AdaptiveCompression, MeasuredCompression)):
        return compression.select(name, tensor)
    return compression
