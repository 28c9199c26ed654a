"""ShardedOptimizer: ZeRO stages 1 and 2 over an hvd process set
(docs/sharded-optimizer.md).

Per (param group, dtype, device) the trainable parameters are flattened, cut
at parameter boundaries into buckets of about bucket_bytes, each bucket one
flat buffer padded to a multiple of D = process_set.size(); every
parameter's .data becomes a view into its bucket, so the model is updated in
place. Rank i of the set owns the contiguous slice i of every bucket (with
one bucket per buffer: slice i of the buffer). The wrapped optimizer is
rebuilt over the owned slices only, so its state (Adam's exp_avg and
exp_avg_sq, SGD's momentum) is 1/D of the unsharded one.

step(): each bucket's gradient is reduce-scattered over the set (rank i
receives the average of slice i), the inner optimizer steps the slices, and
the updated slices are allgathered back into the buckets (as in-place
broadcasts: no output buffer). Stage 1 flattens
and reduce-scatters the full gradients at step(); stage 2 does it from
gradient hooks as each bucket's gradients become ready on the last backward
pass of a step, and drops the full gradients (p.grad = None) once copied,
keeping only the slice's gradient.
"""
import math
from collections import OrderedDict

import torch

from hvd.common.process_sets import global_process_set, set_id
from hvd.torch.mpi_ops import (Average, Max, Sum, allreduce, broadcast_async_, poll, rank, reducescatter_async,
                               synchronize)

# Optimizers of torch.optim whose update of an element reads only that
# element's parameter, gradient and state (plus scalars): stepping a slice
# gives exactly the slice of the unsharded step.
ELEMENTWISE = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.Adagrad,
               torch.optim.Adadelta, torch.optim.RMSprop, torch.optim.Rprop, torch.optim.ASGD, torch.optim.NAdam,
               torch.optim.RAdam)
# Ones that can never be sharded this way: LBFGS reads the whole gradient
# (line search, dot products), SparseAdam takes sparse gradients.
NOT_SHARDABLE = (torch.optim.LBFGS, torch.optim.SparseAdam)


class _Bucket:
    """A run of consecutive parameters of one (group, dtype, device): its
    view of the flat buffer (numel a multiple of D), the parameters'
    offsets in it, and this rank's slice."""

    def __init__(self, index, group, params, names, offsets, numel, flat, d, r):
        self.index = index
        self.group = group
        self.params = params
        self.names = names
        self.offsets = offsets  # start of each parameter in the bucket
        self.numel = numel
        self.flat = flat
        self.part = numel // d
        self.lo = r * self.part
        self.shard = flat[self.lo:self.lo + self.part]
        self.name = 'hvd.zero.%s+%d' % (names[0], len(params))
        self.ready = 0
        self.handle = None
        self.temp = None
        self.done = False

    def ranges(self):
        """(param, name, offset in the bucket, the flat range [a, b) of the
        parameter this rank's slice holds, where in the slice it starts)
        for every parameter the slice touches."""
        out = []
        hi = self.lo + self.part
        for p, n, off in zip(self.params, self.names, self.offsets):
            a, b = max(off, self.lo), min(off + p.numel(), hi)
            if a < b:
                out.append((p, n, off, a - off, b - off, a - self.lo))
        return out


def _check_optimizer(optimizer, elementwise):
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError('hvd: ShardedOptimizer wraps a torch.optim.Optimizer, not %r' % (type(optimizer).__name__,))
    if hasattr(optimizer, 'synchronize') and hasattr(optimizer, 'skip_synchronize'):
        raise ValueError('hvd: ShardedOptimizer wraps the plain torch optimizer, not an hvd DistributedOptimizer '
                         '(it reduces the gradients itself)')
    if isinstance(optimizer, NOT_SHARDABLE):
        raise ValueError('hvd: %s cannot be sharded: its step reads the whole gradient (LBFGS) or takes sparse '
                         'gradients (SparseAdam)' % type(optimizer).__name__)
    if elementwise is None and not isinstance(optimizer, ELEMENTWISE):
        raise ValueError('hvd: ShardedOptimizer cannot tell whether %s updates every element on its own (an '
                         'optimizer with per-tensor norms, such as LAMB or LARS, gives different results when '
                         'each rank steps a slice); pass elementwise=True if it does' % type(optimizer).__name__)
    if elementwise is False:
        raise ValueError('hvd: %s is not element-wise (elementwise=False): it cannot be sharded' %
                         type(optimizer).__name__)
    if any(len(s) for s in optimizer.state.values()):
        raise ValueError('hvd: ShardedOptimizer wraps a fresh optimizer (%s has state already); load state with '
                         'ShardedOptimizer.load_state_dict or hvd.torch.checkpoint.load' % type(optimizer).__name__)


def _names(param_groups, named_parameters):
    """{param: name}; every parameter of the groups named, names unique."""
    if named_parameters is None:
        return {p: 'noname.%d.%d' % (i, j) for i, g in enumerate(param_groups) for j, p in enumerate(g['params'])}
    named = list(named_parameters)
    if any(not isinstance(t, tuple) or len(t) != 2 for t in named):
        raise ValueError('hvd: named_parameters must be (name, parameter) tuples, as model.named_parameters() '
                         'gives')
    names, seen = {}, set()
    for n, p in named:
        if n in seen:
            raise ValueError('hvd: parameter name %r appears twice in named_parameters' % n)
        seen.add(n)
        names[p] = n
    for g in param_groups:
        for p in g['params']:
            if p not in names:
                raise ValueError('hvd: a parameter of shape %s in the optimizer is not in named_parameters' %
                                 list(p.shape))
    return names


class ShardedOptimizer(torch.optim.Optimizer):
    """ZeRO stage 1 or 2 over process_set (default: every rank).

    optimizer: a fresh torch optimizer over the model's parameters whose
        update is element-wise (SGD, Adam, AdamW, RMSprop, Adagrad, ...;
        others refused unless elementwise=True); it is rebuilt over this
        rank's slices, type(optimizer)(slices, **optimizer.defaults) with
        each group's hyperparameters.
    named_parameters: (name, parameter) pairs naming every parameter; the
        collectives are named after them, so they must be equal on every
        member of the set.
    stage: 1 (gradients reduce-scattered at step()) or 2 (from gradient
        hooks during the last backward pass, full gradients released).
    backward_passes_per_step: passes accumulated locally before a step's
        reduction (stage 2; stage 1 reduces at step() anyway).
    bucket_bytes: about how many bytes of parameters one collective moves.
    op: Average (default) or Sum; gradient_predivide_factor as in
        DistributedOptimizer.

    Attributes: optimizer (the inner optimizer over the slices),
    param_groups (the model's parameters, with hyperparameters an LR
    scheduler may change; copied to the inner groups at every step),
    process_set, stage, buckets.
    """

    def __init__(self, optimizer, named_parameters=None, process_set=global_process_set, stage=2,
                 backward_passes_per_step=1, bucket_bytes=25 << 20, op=Average, gradient_predivide_factor=1.0,
                 elementwise=None):
        _check_optimizer(optimizer, elementwise)
        if stage not in (1, 2):
            raise ValueError('hvd: ShardedOptimizer stage must be 1 or 2, not %r' % (stage,))
        if op not in (Average, Sum):
            raise ValueError('hvd: ShardedOptimizer reduces gradients with Average or Sum only (op=%r)' % (op,))
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError('hvd: gradient_predivide_factor needs op=Average')
        if not isinstance(backward_passes_per_step, int) or backward_passes_per_step <= 0:
            raise ValueError('hvd: backward_passes_per_step must be a positive int, not %r' %
                             (backward_passes_per_step,))
        if not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError('hvd: bucket_bytes must be a positive int, not %r' % (bucket_bytes,))
        set_id(process_set)  # raises for a set that is not registered
        if not process_set.included():
            raise ValueError('hvd: rank %d is not a member of process set %s: a ShardedOptimizer is built by the '
                             'members of its set only' % (rank(), process_set))
        groups = optimizer.param_groups
        seen = {}
        for gi, g in enumerate(groups):
            for p in g['params']:
                if p in seen:
                    raise ValueError('hvd: a parameter of shape %s is in param groups %d and %d' %
                                     (list(p.shape), seen[p], gi) if seen[p] != gi else
                                     'hvd: a parameter of shape %s is twice in param group %d' % (list(p.shape), gi))
                seen[p] = gi
                if not p.is_leaf:
                    raise ValueError('hvd: a parameter of shape %s is not a leaf tensor: ShardedOptimizer makes '
                                     'every parameter a view of a flat buffer' % list(p.shape))
                if p.is_sparse:
                    raise ValueError('hvd: ShardedOptimizer takes dense parameters only')
        self._names = _names(groups, named_parameters)
        self.process_set = process_set
        self.stage = stage
        self.backward_passes_per_step = backward_passes_per_step
        self.bucket_bytes = bucket_bytes
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._d = process_set.size()
        self._r = process_set.rank()
        super().__init__([dict(g) for g in groups], optimizer.defaults)

        self.buckets = []
        self._flat = []  # the buckets' flat buffers
        self._build_buckets()
        self._bucket_of = {p: b for b in self.buckets for p in b.params}
        self._offset = {p: off for b in self.buckets for p, off in zip(b.params, b.offsets)}
        inner_groups, self._inner_of = [], []
        for gi, g in enumerate(self.param_groups):
            shards = [b.shard for b in self.buckets if b.group == gi]
            if shards:
                self._inner_of.append(len(inner_groups))
                inner_groups.append(dict({k: v for k, v in g.items() if k != 'params'}, params=shards))
            else:
                self._inner_of.append(None)
        if not inner_groups:
            raise ValueError('hvd: ShardedOptimizer: no parameter of the optimizer requires a gradient')
        self.optimizer = type(optimizer)(inner_groups, **optimizer.defaults)
        self._delay = {p: backward_passes_per_step for b in self.buckets for p in b.params}
        self._synchronized = False
        self._grad_accs = []
        if stage == 2:
            self._register_hooks()

    # ------------------------------------------------------------ layout

    def _build_buckets(self):
        d = self._d
        for gi, g in enumerate(self.param_groups):
            by_kind = OrderedDict()
            for p in g['params']:
                if p.requires_grad:
                    by_kind.setdefault((p.dtype, p.device), []).append(p)
            for (dtype, device), params in by_kind.items():
                runs, run, nbytes = [], [], 0
                for p in params:
                    run.append(p)
                    nbytes += p.numel() * p.element_size()
                    if nbytes >= self.bucket_bytes:
                        runs.append(run)
                        run, nbytes = [], 0
                if run:
                    runs.append(run)
                for run in runs:
                    # One allocation per bucket, filled and the parameters'
                    # old storage released bucket by bucket: building costs
                    # one bucket more than the model, not a second model.
                    numel = max(d, -(-sum(p.numel() for p in run) // d) * d)
                    view = torch.zeros(numel, dtype=dtype, device=device)
                    self._flat.append(view)
                    offsets, off = [], 0
                    for p in run:
                        n = p.numel()
                        view[off:off + n].copy_(p.data.reshape(-1))
                        p.data = view[off:off + n].view(p.shape)
                        offsets.append(off)
                        off += n
                    self.buckets.append(_Bucket(len(self.buckets), gi, run, [self._names[p] for p in run], offsets,
                                                numel, view, d, self._r))

    # ---------------------------------------------------- gradient reduction

    def _register_hooks(self):
        for b in self.buckets:
            for p in b.params:
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(p, b))
                self._grad_accs.append(grad_acc)

    def _make_hook(self, p, b):
        def hook(*_):
            if self._delay[p] <= 0:
                raise AssertionError('hvd: the gradient of %s was computed more than backward_passes_per_step=%d '
                                     'times before step()' % (self._names[p], self.backward_passes_per_step))
            self._delay[p] -= 1
            if self._delay[p] == 0:
                b.ready += 1
                if b.ready == len(b.params) and b.handle is None:
                    self._launch(b)
                    self._reap()
        return hook

    def _flatten(self, b):
        """The bucket's gradient as one flat tensor (zeros where a parameter
        has none, and in the padding)."""
        g = torch.zeros(b.numel, dtype=b.flat.dtype, device=b.flat.device)
        for p, off in zip(b.params, b.offsets):
            if p.grad is not None:
                src = p.grad.to_dense() if p.grad.is_sparse else p.grad
                g[off:off + p.numel()].copy_(src.reshape(-1))
        return g

    def _launch(self, b):
        g = self._flatten(b)
        if self.stage == 2:
            for p in b.params:
                p.grad = None
        if self._d == 1:
            b.temp, b.handle = g, True
            return
        pre, post = (1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor) \
            if self.op == Average else (1.0, 1.0)
        b.temp = g
        b.handle = reducescatter_async(g, name=b.name + '.rs', op=self.op, process_set=self.process_set,
                                       prescale_factor=pre, postscale_factor=post)

    def _finish(self, b):
        """Waits for b's reduce-scatter; the slice's gradient becomes its
        result."""
        if b.handle is True:
            b.shard.grad = b.temp[b.lo:b.lo + b.part]
        else:
            b.shard.grad = synchronize(b.handle).reshape(-1)
        b.handle, b.temp = None, None
        b.done = True

    def _reap(self):
        """Completes the launched reductions that are done (stage 2, during
        the backward pass), so their flat gradients are freed early."""
        for b in self.buckets:
            if b.handle is not None and (b.handle is True or poll(b.handle)):
                self._finish(b)

    def synchronize(self):
        """Reduce-scatters every bucket's gradient not reduced yet (zeros for
        parameters without a gradient) and waits: afterwards each slice holds
        its averaged gradient (optimizer.optimizer's parameters' .grad)."""
        if self._synchronized:
            return
        window = max(2 * self.bucket_bytes, 1)
        inflight = []
        for b in self.buckets:
            if b.done:
                continue
            if b.handle is None:
                self._launch(b)
            inflight.append(b)
            while len(inflight) > 1 and sum(x.numel * x.flat.element_size() for x in inflight) > window:
                self._finish(inflight.pop(0))
        for b in inflight:
            self._finish(b)
        self._synchronized = True

    # -------------------------------------------------------------- step

    def _sync_hyper(self):
        for g, ii in zip(self.param_groups, self._inner_of):
            if ii is not None:
                inner = self.optimizer.param_groups[ii]
                for k, v in g.items():
                    if k != 'params':
                        inner[k] = v

    def _allgather_params(self):
        """Every member's updated slice into every member's bucket: an
        allgather done as D in-place broadcasts per bucket (member r's slice
        from r), which the engine writes straight into the bucket's memory —
        the same bytes as an allgather, without an output buffer and a copy
        per bucket (hvd's allgather returns a new tensor)."""
        if self._d == 1:
            return
        handles = []
        for b in self.buckets:
            for r, root in enumerate(self.process_set.ranks):
                handles.append(broadcast_async_(b.flat[r * b.part:(r + 1) * b.part], root_rank=root,
                                                name='%s.ag%d' % (b.name, r), process_set=self.process_set))
        for h in handles:
            synchronize(h)

    def _end_step(self):
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        for b in self.buckets:
            b.ready = 0
            b.done = False
        self._synchronized = False

    def step(self, closure=None):
        """closure (optional) recomputes the loss and gradients first; then
        the gradients are reduced (unless synchronize() did it), the inner
        optimizer steps this rank's slices with the param groups'
        hyperparameters, and the slices are allgathered into the model."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        self._sync_hyper()
        self.optimizer.step()
        self._allgather_params()
        self._end_step()
        return loss

    def zero_grad(self, set_to_none=False):
        """Zeroes (or drops) the model's gradients and the slices'; refused
        between a reduction's launch and step()/synchronize()."""
        if any(b.handle is not None for b in self.buckets):
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but before '
                                 'optimizer.step() or optimizer.synchronize(): the gradients are being reduced')
        for g in self.param_groups:
            for p in g['params']:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        if p.grad.grad_fn is not None:
                            p.grad.detach_()
                        else:
                            p.grad.requires_grad_(False)
                        p.grad.zero_()
        for b in self.buckets:
            b.shard.grad = None
        self._end_step()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def add_param_group(self, param_group):
        if getattr(self, 'optimizer', None) is not None:
            raise NotImplementedError('hvd: ShardedOptimizer cannot add a param group after it is built')
        super().add_param_group(param_group)

    # ---------------------------------------------------------- clipping

    def clip_grad_norm_(self, max_norm, norm_type=2.0, extra_process_sets=(), replicated_over=None):
        """Clips the reduced gradient (the slices') by its global norm, as
        torch.nn.utils.clip_grad_norm_ on the whole model would, and returns
        that norm. Reduces first (synchronize()).

        The norm is over the data-parallel set (every slice) and then over
        each of extra_process_sets, whose members hold other parameters (the
        tensor-parallel set: other chunks; the pipeline set: other stages):
        their norms add. replicated_over: a process set (usually the
        tensor-parallel one) over which the parameters without an
        hvd_tensor_parallel attribute are copies: they count on its first
        member only."""
        self.synchronize()
        norm_type = float(norm_type)
        skip = replicated_over is not None and replicated_over.rank() != 0
        parts = []
        for b in self.buckets:
            g = b.shard.grad
            if g is None:
                continue
            if skip:
                for p, _, off, a, e, s in b.ranges():
                    if getattr(p, 'hvd_tensor_parallel', None) is not None:
                        parts.append(g[s:s + e - a])
            else:
                parts.append(g)
        dev = self.buckets[0].flat.device
        if math.isinf(norm_type):
            local = torch.stack([x.abs().max() for x in parts if x.numel()]).max().double() \
                if any(x.numel() for x in parts) else torch.zeros((), dtype=torch.float64, device=dev)
            op = Max
        else:
            local = sum((x.double().abs() ** norm_type).sum() for x in parts) if parts else \
                torch.zeros((), dtype=torch.float64, device=dev)
            local = torch.as_tensor(local, dtype=torch.float64, device=dev)
            op = Sum
        total = local.reshape(1)
        for ps in (self.process_set,) + tuple(extra_process_sets):
            if ps.size() > 1:
                total = allreduce(total, op=op, process_set=ps, name=None)
        total = total[0] if math.isinf(norm_type) else total[0] ** (1.0 / norm_type)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for b in self.buckets:
            if b.shard.grad is not None:
                b.shard.grad.mul_(coef.to(b.shard.grad.dtype))
        return total

    # ------------------------------------------------------------- state

    def layout(self):
        """What a state_dict of this optimizer depends on."""
        return {'stage': self.stage, 'size': self._d, 'rank': self._r,
                'buckets': [[b.group, str(b.flat.dtype), b.numel, b.names[0], len(b.params)] for b in self.buckets]}

    def state_dict(self):
        """This rank's slice state (loadable at the same layout only; use
        hvd.torch.checkpoint to change it)."""
        return {'zero': self.layout(), 'optimizer': self.optimizer.state_dict(),
                'param_groups': [{k: v for k, v in g.items() if k != 'params'} for g in self.param_groups]}

    def load_state_dict(self, state_dict):
        if not isinstance(state_dict, dict) or 'zero' not in state_dict:
            raise ValueError('hvd: ShardedOptimizer.load_state_dict takes what its state_dict() returned')
        if state_dict['zero'] != self.layout():
            raise ValueError('hvd: ShardedOptimizer state of another layout (saved %s, here %s): load it with '
                             'hvd.torch.checkpoint to reshard' % (state_dict['zero'], self.layout()))
        self.optimizer.load_state_dict(state_dict['optimizer'])
        for g, saved in zip(self.param_groups, state_dict['param_groups']):
            g.update(saved)
        self._end_step()

    def owned_range(self, p):
        """None for a parameter this optimizer does not manage; else
        (a, b, slice, s): this rank's slice holds p's flattened elements
        [a, b) (empty when a == b) at slice[s:s + b - a]; slice is a
        parameter of the inner optimizer (its state is keyed by it)."""
        b = self._bucket_of.get(p)
        if b is None:
            return None
        off = self._offset[p]
        a, e = max(off, b.lo), min(off + p.numel(), b.lo + b.part)
        if a >= e:
            return 0, 0, b.shard, 0
        return a - off, e - off, b.shard, a - b.lo

    def state_bytes(self):
        """Bytes of the inner optimizer's state tensors on this rank."""
        return sum(v.numel() * v.element_size() for s in self.optimizer.state.values() for v in s.values()
                   if torch.is_tensor(v))

    def __repr__(self):
        return 'ShardedOptimizer(stage=%d, %s, D=%d, %d buckets)' % (self.stage, type(self.optimizer).__name__,
                                                                    self._d, len(self.buckets))
