"""DistributedOptimizer (horovod.torch.optimizer)."""
import warnings
from contextlib import contextmanager

import torch

from hvd.common import loader
from hvd.common.collectives import check_priority
from hvd.common.handles import synchronize_many
from hvd.common.ops import check_adasum
from hvd.common.process_sets import global_process_set, set_id
from hvd.torch.compression import AdaptiveCompression, Compression, MeasuredCompression, TopKCompressor, select
from hvd.torch.functions import broadcast_object
from hvd.torch.mpi_ops import (Adasum, Average, allreduce_async_, grouped_allreduce_async_, rocm_built, size,
                               sparse_allreduce_async, synchronize)
from hvd.torch.tensors import collectives as _c
from hvd.torch.zero import ShardedOptimizer


def split_list(values, n):
    """Splits values into n near-equal consecutive chunks."""
    d, r = divmod(len(values), n)
    return [values[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def _named_parameters(param_groups, named_parameters):
    """named_parameters as a list of (name, parameter), checked as Horovod
    does (tuples, unique names, every parameter named); generated names
    when None."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [('allreduce.noname.%s.%s' % (i, j), v)
                            for i, param_group in enumerate(param_groups)
                            for j, v in enumerate(param_group['params'])]
    # make sure that named_parameters are tuples
    if any([not isinstance(p, tuple) for p in named_parameters]):
        raise ValueError('named_parameters should be a sequence of '
                         'tuples (name, parameter), usually produced by '
                         'model.named_parameters().')

    dups = _DistributedOptimizer.find_duplicates([k for k, _ in named_parameters])
    if len(dups) > 0:
        raise ValueError('Parameter names in named_parameters must be unique. '
                         'Found duplicates: %s' % ', '.join(dups))

    all_param_ids = {id(v) for param_group in param_groups for v in param_group['params']}
    named_param_ids = {id(v) for k, v in named_parameters}
    unnamed_param_ids = all_param_ids - named_param_ids
    if len(unnamed_param_ids):
        raise ValueError('named_parameters was specified, but one or more model '
                         'parameters were not named. Python object ids: '
                         '%s' % ', '.join(str(id) for id in unnamed_param_ids))
    return named_parameters


def _priorities(param_groups, named_parameters, priorities):
    """The priority of every parameter's allreduce (DistributedOptimizer's
    priorities=): None, all 0 (Horovod's order); 'layer_order', the order
    in which the optimizer lists the parameters — the order of the model's
    layers for model.parameters() — first highest, so that among the
    gradients ready together the layers the next forward pass needs first
    are reduced first; a dict from parameter name (or the parameter itself)
    to int, missing ones 0; or a callable (name, parameter) -> int."""
    params = [v for group in param_groups for v in group['params']]
    if priorities is None:
        return {}
    names = {id(v): k for k, v in named_parameters}
    if isinstance(priorities, str):
        if priorities != 'layer_order':
            raise ValueError("priorities must be None, 'layer_order', a dict or a callable, not %r" % (priorities,))
        return {p: len(params) - i for i, p in enumerate(params)}
    out = {}
    for p in params:
        name = names.get(id(p))
        if isinstance(priorities, dict):
            v = priorities.get(name, priorities.get(p, 0)) if name is not None else priorities.get(p, 0)
        elif callable(priorities):
            v = priorities(name, p)
        else:
            raise ValueError("priorities must be None, 'layer_order', a dict or a callable, not %r" % (priorities,))
        out[p] = check_priority(v)
    return out


def _check_bucket(bucket_bytes):
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 0:
        raise ValueError('hvd: bucket_bytes must be a non-negative integer (0: launch each gradient\'s '
                         'allreduce from its hook, as Horovod does), not %r' % (bucket_bytes,))
    return bucket_bytes


def _count_pass(handles, delay, p):
    """A gradient hook's bookkeeping, as Horovod's: AssertionError when p's
    gradient was computed more than backward_passes_per_step times before
    step(); counts the pass; True when p's gradient is due for reduction."""
    if p in handles and handles[p][0] is not None:
        if delay[p] <= 0:
            raise AssertionError(
                'Gradients were computed more than '
                'backward_passes_per_step times before call '
                'to step(). Increase backward_passes_per_step to '
                'accumulate gradients locally.')
    assert not p.grad.requires_grad
    assert delay[p] > 0
    delay[p] -= 1
    return delay[p] == 0


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set, priorities=None, overlap_forward=None, bucket_bytes=0):
        super(self.__class__, self).__init__(params)
        self._compression = compression

        named_parameters = _named_parameters(self.param_groups, named_parameters)
        self._priority = _priorities(self.param_groups, named_parameters, priorities)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        self._handles = {}
        # Gradients whose hooks fired but whose allreduces are not launched
        # yet (bucketed launch, _defer): launched together when their bytes
        # reach the bucket or when backward ends.
        self._deferred = []
        self._deferred_bytes = 0
        self._end_queued = False
        self._bucket_bytes = bucket_bytes
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        if groups is not None:
            if not (isinstance(groups, list) or groups > 0):
                raise ValueError('groups should be a non-negative integer or '
                                 'a list of list of torch.Tensor.')
            if isinstance(groups, list):
                grouped_parameter_ids = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError('groups must consist of torch.Tensor.')
                        if id(p) in grouped_parameter_ids:
                            raise ValueError('A parameter can only appear once in groups.')
                        grouped_parameter_ids.add(id(p))
        if groups is not None and isinstance(compression, (AdaptiveCompression, MeasuredCompression, TopKCompressor)):
            raise ValueError('hvd: %s cannot be combined with groups (a group is one grouped allreduce; '
                             'top-k gradients are reduced by allgathers)' % (compression,))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}

        # overlap_forward (hvd's addition): step() defers each parameter's
        # update to just before the next forward pass uses it (_overlap).
        self._pending = set()
        self._zero_after = None
        self._step_hyper = None
        self._overlap = None
        if overlap_forward is not None:
            owned = _ForwardOverlap.owned(self, overlap_forward)  # checked first: nothing registered on failure
        if self.process_set.included() and (size() > 1 or loader.elastic_worker()):
            if overlap_forward is not None:
                self._overlap = _ForwardOverlap(self, overlap_forward, owned)
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        # Deferred updates (overlap_forward) are dropped with the handles: the
        # loaded state replaces them (an elastic restore after a failure).
        self._pending.clear()
        self._zero_after = None
        self._handles = {}
        # Gradients held back by a backward pass that failed (its end-of-backward
        # callback never ran) are dropped too.
        self._deferred, self._deferred_bytes, self._end_queued = [], 0, False
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    @staticmethod
    def find_duplicates(lst):
        seen = set()
        dups = set()
        for el in lst:
            if el in seen:
                dups.add(el)
            seen.add(el)
        return dups

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def _register_hooks(self):
        if self._groups is not None:
            p_list = []
            # Get list of parameters with grads
            for param_group in self.param_groups:
                for p in param_group['params']:
                    if p.requires_grad:
                        p_list.append(p)

            # To ensure parameter order and group formation is consistent, broadcast p_list order
            # from rank 0 and use for every worker
            p_list_names = [self._parameter_names.get(p) for p in p_list]
            p_list_names = broadcast_object(p_list_names, root_rank=self.process_set.ranks[0],
                                            name='DistributedOptimizer.groups', process_set=self.process_set)
            p_list = sorted(p_list, key=lambda p: p_list_names.index(self._parameter_names.get(p)))

            # Form groups
            if isinstance(self._groups, list):
                p_groups = []
                grouped_id = set()
                p_list_ids = [id(p) for p in p_list]
                for group in self._groups:
                    p_groups.append([p for p in group if id(p) in p_list_ids])
                    for p in p_groups[-1]:
                        grouped_id.add(id(p))
                for p in p_list:
                    if id(p) not in grouped_id:
                        p_groups.append([p])
            else:
                p_groups = split_list(p_list, self._groups)

            p_groups = [tuple(p) for p in p_groups if p]
            for group in p_groups:
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for param_group in self.param_groups:
            for p in param_group['params']:
                if p.requires_grad:
                    self._requires_update.add(p)
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _scales(self):
        if self.op == Average:
            # Split the average across pre/postscale; the engine divides
            # the postscale by the set size for Average.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p, comp=None):
        if p.grad is None:
            # Gradient was not computed, but we still need to submit a tensor to allreduce
            # as one of the other ranks may have computed it (due to dynamic forward functions).
            p.grad = p.data.new(p.size()).zero_()

        name = self._parameter_names.get(p)
        tensor = p.grad

        if p.grad.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return self._sparse_allreduce_grad_async(p, name)

        if comp is None:
            comp = select(self._compression, name, tensor)
        if getattr(comp, 'sparse', False):
            # Top-k with error feedback: two allgathers, a callable handle.
            return comp.reduce_async(name, tensor, self.op, self.process_set, self._priority.get(p, 0)), None
        tensor_compressed, ctx = comp.compress(tensor)
        prescale_factor, postscale_factor = self._scales()
        handle = allreduce_async_(tensor_compressed, name=name, op=self.op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=self.process_set,
                                  priority=self._priority.get(p, 0))
        return handle, (ctx, tensor_compressed, comp)

    def _grouped_allreduce_grad_async(self, ps):
        name = self._parameter_names.get(ps[0])
        tensors = []
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
            g = p.grad.to_dense() if p.grad.is_sparse else p.grad
            tensors.append(g)
        compressed = [self._compression.compress(t) for t in tensors]
        tensors_compressed = [c[0] for c in compressed]
        ctxs = [(c[1], c[0]) for c in compressed]
        prescale_factor, postscale_factor = self._scales()
        handle = grouped_allreduce_async_(tensors_compressed, name=name, op=self.op,
                                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                          process_set=self.process_set,
                                          priority=max(self._priority.get(p, 0) for p in ps))
        return handle, ctxs

    def _sparse_allreduce_grad_async(self, p, name):
        handle = sparse_allreduce_async(p.grad, name=name, op=self.op, process_set=self.process_set)
        return handle, None

    def _make_hook(self, p):
        def hook(*ignore):
            if self._pending:
                self._flush()  # overlap_forward: a backward pass without a forward one
            handle, ctx = None, None
            if _count_pass(self._handles, self._allreduce_delay, p):
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        handle, ctxs = self._grouped_allreduce_grad_async(group)
                        self._handles[group] = (handle, ctxs)
                        # Remove any None entries from previous no-op hook calls
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                elif self._bucket_bytes and p.grad is not None and not p.grad.is_sparse and not p.grad.is_cuda:
                    # The compressor is chosen once per gradient and step (a
                    # measuring policy counts each call).
                    comp = select(self._compression, self._parameter_names.get(p), p.grad)
                    if not getattr(comp, 'sparse', False):
                        self._defer(p, comp)
                        return
                    handle, ctx = self._allreduce_grad_async(p, comp)
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def _defer(self, p, comp):
        """Holds p's allreduce back until the bucket is full or backward
        ends (a callback queued on the autograd engine), then launches the
        held ones together."""
        if not self._end_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._launch_deferred)
            self._end_queued = True
        self._deferred.append((p, comp))
        self._deferred_bytes += p.grad.numel() * p.grad.element_size()
        if self._deferred_bytes >= self._bucket_bytes:
            self._launch_deferred(end=False)

    def _launch_deferred(self, end=True):
        """Launches the held allreduces in one library call (at the end of
        backward, or when the bucket is full)."""
        if end:
            self._end_queued = False
        if not self._deferred:
            return
        ps, self._deferred, self._deferred_bytes = self._deferred, [], 0
        tensors, ctxs, names, prios = [], [], [], []
        for p, comp in ps:
            t, ctx = comp.compress(p.grad)
            tensors.append(t)
            ctxs.append((ctx, t, comp))
            names.append(self._parameter_names.get(p))
            prios.append(self._priority.get(p, 0))
        prescale_factor, postscale_factor = self._scales()
        # At the end of backward (synchronize comes next), with
        # HVD_CALLER_ROUNDS=1, this thread runs the round itself while the
        # engine sleeps, rather than waking the engine's thread and being
        # woken by it (issue 27; experimental, off: measured slower).
        handles = _c.allreduce_many_async_(tensors, names, prios, self.op, prescale_factor, postscale_factor,
                                           self.process_set, drive=end)
        for (p, _), h, ctx in zip(ps, handles, ctxs):
            self._handles[p] = (h, ctx)

    def _decompressed(self, p, output, ctx):
        comp = ctx[2] if len(ctx) > 2 else self._compression
        return comp.decompress(output, ctx[0])

    def synchronize(self):
        """Waits for every gradient's allreduce (launching the missing ones,
        with zeros for parameters without a gradient, so that every rank
        submits the same tensors) and writes the averaged gradients."""
        if not self.process_set.included():
            self._synchronized = True
            return
        self._flush()
        self._launch_deferred()
        self._launch_missing()
        # The plain allreduces are waited for at once (one library call).
        plain = [(k, h) for k, (h, _) in self._handles.items()
                 if not isinstance(k, tuple) and h is not None and not callable(h)]
        outs = dict(zip((k for k, _ in plain), synchronize_many([h for _, h in plain], drive=True)))
        for key, (handle, ctx) in self._handles.items():
            self._complete(key, handle, ctx, outs.get(key))
        self._handles.clear()
        self._synchronized = True
        self._end_step()

    def _end_step(self):
        """Tells a measuring compression policy that a step's gradients were
        all selected (every rank of the set calls it once per step)."""
        end = getattr(self._compression, 'end_step', None)
        if end is not None:
            end(self.process_set)

    def _launch_missing(self):
        """Launches the allreduces not launched by a gradient hook (the
        parameters without a gradient get zeros), in name order on every
        rank."""
        completed = set()
        for x in self._handles.keys():
            completed.update(x) if isinstance(x, tuple) else completed.add(x)
        missing_p = self._requires_update - completed

        if self._groups is not None:
            # Launch whole groups for the parameters whose hook never fired.
            launched = set()
            for p in sorted(missing_p, key=lambda q: self._parameter_names.get(q)):
                group = self._p_to_group[p]
                if group in launched or group in self._handles:
                    continue
                launched.add(group)
                handle, ctxs = self._grouped_allreduce_grad_async(group)
                for gp in group:
                    self._handles.pop(gp, None)
                self._handles[group] = (handle, ctxs)
                self._group_counts[group] = 0
            for key in list(self._handles.keys()):
                handle, _ = self._handles[key]
                if not isinstance(key, tuple) and handle is None:
                    group = self._p_to_group[key]
                    if group in self._handles:
                        self._handles.pop(key)
                        continue
                    handle, ctxs = self._grouped_allreduce_grad_async(group)
                    for gp in group:
                        self._handles.pop(gp, None)
                    self._handles[group] = (handle, ctxs)
                    self._group_counts[group] = 0
        else:
            for p in sorted(missing_p, key=lambda q: self._parameter_names.get(q)):
                self._handles[p] = self._allreduce_grad_async(p)
            for p, (handle, ctx) in list(self._handles.items()):
                if handle is None:
                    self._handles[p] = self._allreduce_grad_async(p)

    def _complete(self, p, handle, ctx, output=None):
        """Waits for one launched allreduce (p: a parameter, or a group's
        tuple) and writes the reduced gradient(s)."""
        if isinstance(p, tuple):
            # A grouped result: unpack.
            outputs = synchronize(handle)
            for gp, output, gctx in zip(p, outputs, ctx):
                self._allreduce_delay[gp] = self.backward_passes_per_step
                out = self._decompressed(gp, output, gctx)
                if gp.grad.is_sparse:
                    gp.grad = out.to_sparse()
                else:
                    gp.grad.set_(out)
        elif callable(handle):
            # Sparse allreduce or top-k: the handle is a callable.
            self._allreduce_delay[p] = self.backward_passes_per_step
            out = handle()
            if p.grad.is_sparse or out.is_sparse:
                p.grad = out
            else:
                p.grad.copy_(out)
        else:
            if output is None:
                output = synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            out = self._decompressed(p, output, ctx)
            if p.grad.is_sparse:
                # sparse_as_dense: back to sparse.
                p.grad = out.to_sparse()
            else:
                p.grad.set_(out)

    def _only(self, params, method, *args, hyper=None, **kwargs):
        """Calls the wrapped optimizer's method (step, zero_grad) on the
        given parameters alone; with hyper (one dict per param group), with
        those hyperparameters in place of the current ones."""
        keep = set(params)
        stashed = []  # per group: its parameter list and the hyperparameters replaced
        for i, group in enumerate(self.param_groups):
            swapped = hyper[i] if hyper is not None else {}
            stashed.append((group['params'], {k: group[k] for k in swapped}))
            group['params'] = [q for q in group['params'] if q in keep]
            group.update(swapped)
        try:
            return getattr(super(self.__class__, self), method)(*args, **kwargs)
        finally:
            for (params_, replaced), group in zip(stashed, self.param_groups):
                group['params'] = params_
                group.update(replaced)

    def _apply(self, params):
        """overlap_forward: completes the deferred step for these pending
        parameters (and those sharing a grouped allreduce with them): waits
        for their allreduces and runs the wrapped optimizer on them alone."""
        keys, seen = [], set()
        for p in params:
            key = self._p_to_group.get(p, p) if self._groups is not None else p
            if key in self._handles and id(key) not in seen:
                seen.add(id(key))
                keys.append(key)
        done = []
        for key in keys:
            handle, ctx = self._handles.pop(key)
            self._complete(key, handle, ctx)
            done.extend(key if isinstance(key, tuple) else (key,))
        done = [p for p in done if p in self._pending]
        if not done:
            return
        self._pending.difference_update(done)
        # With the hyperparameters of the step() call (an LR scheduler may
        # have stepped since).
        self._only(done, 'step', hyper=self._step_hyper)
        if self._zero_after is not None:
            self._only(done, 'zero_grad', *self._zero_after[0], **self._zero_after[1])
        if not self._pending:
            self._zero_after = None

    def _flush(self):
        """overlap_forward: completes whatever the deferred step left."""
        if self._pending:
            self._apply(list(self._pending))

    @contextmanager
    def skip_synchronize(self):
        """A context in which step() does not synchronize (because
        synchronize() was called explicitly, e.g. to clip gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def state_dict(self, *args, **kwargs):
        self._flush()
        return super(self.__class__, self).state_dict(*args, **kwargs)

    def step(self, closure=None):
        if self._overlap is not None and self._should_synchronize:
            # Deferred: each parameter is updated by the forward pre-hook of
            # the module owning it (or at the next flush point).
            if closure is not None:
                raise ValueError('hvd: DistributedOptimizer(overlap_forward=...) defers step(); '
                                 'it takes no closure')
            self._flush()
            self._launch_deferred()
            self._launch_missing()
            self._end_step()
            self._step_hyper = [{k: v for k, v in g.items() if k != 'params'} for g in self.param_groups]
            self._pending = set(self._requires_update)
            self._synchronized = False
            return None
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() called without '
                              'optimizer.skip_synchronize() context after '
                              'optimizer.synchronize(). This can cause training '
                              'slowdown. You may want to consider using '
                              'optimizer.skip_synchronize() context if you use '
                              'optimizer.synchronize() in your code.')
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if getattr(self, '_pending', None):  # (the Adasum optimizer shares this method and has none)
            # overlap_forward: the deferred updates still need their
            # gradients; those are zeroed once applied.
            self._zero_after = (args, kwargs)
            rest = [p for group in self.param_groups for p in group['params'] if p not in self._pending]
            return self._only(rest, 'zero_grad', *args, **kwargs)
        if self._handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() '
                                 'but before optimizer.step() or optimizer.synchronize(). '
                                 'This is prohibited as it can cause a race condition.')
        return super(self.__class__, self).zero_grad(*args, **kwargs)


class _ForwardOverlap:
    """DistributedOptimizer(overlap_forward=model): step() returns at once
    and each parameter's update is applied by a forward pre-hook of the
    module that owns it, when the next forward pass reaches that module. The
    allreduces of the layers the forward pass needs last (the first ones
    reduced, as the backward pass produces them first) then overlap the
    forward pass of the first layers; with priorities='layer_order' the
    first layers' gradients are reduced before the others ready with them.
    A forward hook on the model applies what the pass did not reach
    (parameters it did not use); step(), synchronize(), state_dict() and a
    gradient hook apply everything first; load_state_dict() drops it."""

    def __init__(self, opt, model, owned):
        for m, own in owned:
            m.register_forward_pre_hook(self._pre(opt, own))
        model.register_forward_hook(lambda *_: opt._flush())

    @staticmethod
    def owned(opt, model):
        """The (module, its parameters of opt) pairs of model; ValueError
        for anything but a module owning some of them."""
        if not isinstance(model, torch.nn.Module):
            raise ValueError('hvd: overlap_forward takes the model (a torch.nn.Module) whose forward '
                             'pass uses the parameters, not %r' % (type(model).__name__,))
        params = {p for group in opt.param_groups for p in group['params']}
        out = []
        for m in model.modules():
            own = [p for p in m.parameters(recurse=False) if p in params]
            if own:
                out.append((m, own))
        if not out:
            raise ValueError("hvd: overlap_forward: the model owns none of the optimizer's parameters")
        return out

    @staticmethod
    def _pre(opt, own):
        def hook(*_):
            if opt._pending:
                opt._apply([p for p in own if p in opt._pending])
        return hook


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Horovod's delta optimizer for op=Adasum (horovod/torch/optimizer.py):
    when a parameter's gradient is ready (after backward_passes_per_step
    backward passes), the wrapped optimizer steps that parameter alone, the
    change it made (delta = new - start) is allreduced with Adasum in place
    of the parameter, and step() sets the parameter to start + the reduced
    delta. Adasum thus combines the optimizer's updates, at their full
    magnitude, rather than the gradients (docs/adasum_user_guide.rst)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        named_parameters = _named_parameters(self.param_groups, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step for _, v in named_parameters}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        # Per parameter: its value before the local step (the start of the delta).
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for _, p in named_parameters}
        self._register_hooks()

    set_backward_passes_per_step = _DistributedOptimizer.set_backward_passes_per_step

    def _register_hooks(self):
        for param_group in self.param_groups:
            for p in param_group['params']:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        # start = p; the wrapped optimizer steps p alone; p -= start leaves
        # the delta in p, which is reduced in place (step() puts back
        # start + reduced delta).
        name = self._parameter_names.get(p)
        start = self._starting_models[p]
        start.data.copy_(p)
        self._only([p], 'step')
        p.data.sub_(start)
        tensor_compressed, ctx = self._compression.compress(p)
        handle = allreduce_async_(tensor_compressed.data, name=name, op=Adasum)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            handle, ctx = None, None
            if _count_pass(self._handles, self._allreduce_delay, p):
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """A no-op: the deltas are reduced and applied by step()."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError('Skipping synchronization is not supported when using Adasum optimizer.')

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        # Parameters whose hook never fired (no gradient this step) still
        # take part, in name order on every rank.
        missing = self._requires_update - set(self._handles.keys())
        for p in sorted(missing, key=lambda q: self._parameter_names.get(q)):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                # step() before backward_passes_per_step passes: reduce now.
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[p] = (handle, ctx)
        for p, (handle, ctx) in self._handles.items():
            delta = self._compression.decompress(synchronize(handle), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    # The same as _DistributedOptimizer's (its __dict__ is copied into the
    # class DistributedOptimizer builds, so a shared base would not be seen).
    zero_grad = _DistributedOptimizer.zero_grad
    _only = _DistributedOptimizer._only


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set, priorities=None,
                         overlap_forward=None, zero_stage=None, bucket_bytes=25 << 20):
    """Wraps a torch optimizer so that step() averages gradients over the
    process set first (allreduces launched from backward hooks as gradients
    become ready, overlapping the backward pass).

    named_parameters: model.named_parameters(), names the allreduces;
    compression: Compression.none, .fp16, .bf16, or (hvd's additions, issue 18) .topk(ratio), top-k with
        error feedback, or .adaptive(rules, default), a compressor chosen per parameter by name pattern or size
        (not with groups);
    backward_passes_per_step: local gradient accumulation before allreduce;
    op: Average (default), Sum, or Adasum: Horovod's delta optimizer — each rank's optimizer steps
        locally and the parameter changes are combined with Adasum (global set, power-of-two
        size; with one rank, a plain optimizer);
    gradient_predivide_factor: divide before the sum, multiply after (Average only);
    groups: an int k (parameters split into k grouped allreduces) or a list of lists of parameters;
    sparse_as_dense: allreduce sparse gradients as dense tensors;
    process_set: reduce over this set only (non-members: synchronize is a no-op);
    priorities (hvd's addition, off by default): None; 'layer_order' — among the gradients ready
        at the same time, the parameters the optimizer lists first (the first layers, which the
        next forward pass needs first) are negotiated, fused and reduced first; a dict from
        parameter name to int; or a callable (name, parameter) -> int. Higher goes first.
    overlap_forward (hvd's addition, off by default): the model. step() then returns without
        waiting, and each parameter is updated when the next forward pass reaches the module
        owning it, so the remaining allreduces overlap the forward pass (with
        priorities='layer_order', the first layers' come first). For optimizers that update each
        parameter on its own (SGD, Adam, AdamW, RMSprop, Adagrad, ...); no closure; a parameter
        used by another module before its owner runs sees its previous value.
    zero_stage (hvd's addition, off by default): 1 or 2 returns a ShardedOptimizer (hvd.torch.zero,
        docs/sharded-optimizer.md) over process_set, with bucket_bytes; it refuses the options it
        cannot honour (compression, Adasum, groups, priorities, overlap_forward).
    bucket_bytes (hvd's addition; 25 MiB, DDP's bucket_cap_mb): the hooks hold gradients back and
        hand them to the library together, one call per bucket (when the held bytes reach
        bucket_bytes) and one when backward ends, instead of one call and one engine wake-up per
        gradient (issue 27: a step of a small model spent more in those than in the reduction).
        Every gradient is still its own named allreduce (names, priorities, fusion, the timeline
        and the response cache are unchanged). 0: Horovod's behaviour, each gradient launched from
        its hook. Groups, sparse and top-k gradients, CUDA tensors and Adasum always launch from
        their hooks.
    """
    if zero_stage is not None:
        refused = (('compression other than Compression.none', compression is not Compression.none),
                   ('op=Adasum', op == Adasum), ('groups', bool(groups) or bool(num_groups)),
                   ('priorities', priorities is not None), ('overlap_forward', overlap_forward is not None))
        bad = [what for what, on in refused if on]
        if bad:
            raise ValueError('hvd: DistributedOptimizer(zero_stage=%r) cannot honour %s' %
                             (zero_stage, ', '.join(bad)))
        return ShardedOptimizer(optimizer, named_parameters=named_parameters, process_set=process_set,
                                stage=zero_stage, backward_passes_per_step=backward_passes_per_step,
                                bucket_bytes=bucket_bytes, op=op, gradient_predivide_factor=gradient_predivide_factor)
    if gradient_predivide_factor != 1.0:
        if rocm_built():
            raise ValueError('gradient_predivide_factor not supported yet with ROCm')
        if op != Average:
            raise ValueError('gradient_predivide_factor not supported with op != Average')

    if overlap_forward is not None and op == Adasum:
        raise ValueError('hvd: overlap_forward cannot be combined with op=Adasum (its step is already per parameter)')

    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` '
                      'and will be removed in v0.23.0.', DeprecationWarning)
        if groups is None:
            groups = num_groups

    if backward_passes_per_step <= 0:
        raise ValueError('backward_passes_per_step must be > 0')

    if op == Adasum and size() > 1:
        # Horovod's delta optimizer (groups and sparse_as_dense do not apply).
        check_adasum(set_id(process_set), size())
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)

    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set, priorities, overlap_forward,
               _check_bucket(bucket_bytes))
