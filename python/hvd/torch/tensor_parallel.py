"""Tensor parallelism (Megatron-LM style) over an hvd process set.

A tensor-parallel set of T ranks holds one shard of each split layer. The
collectives are hvd's (allreduce, allgather) on that set, wrapped as
autograd functions so forward and backward issue the matching pair:

    copy_to_tensor_parallel      forward identity     backward allreduce(Sum)
    reduce_from_tensor_parallel  forward allreduce    backward identity
    scatter_to_tensor_parallel   forward own chunk    backward allgather
    gather_from_tensor_parallel  forward allgather    backward own chunk

With T == 1 every piece is the plain op and issues no collective. Every
member of a set issues the same collectives in the same order (hvd names
unnamed ops by call order), so members must run the same layers on tensors
of the same shapes.

A sharded parameter carries ``param.hvd_tensor_parallel = (dim, index,
count)``: it is chunk ``index`` of ``count`` equal chunks of the full
parameter along ``dim`` (T == 1 gives ``(dim, 0, 1)``). Replicated
parameters (RowParallelLinear's bias) have no such attribute.

Layers built with their constructors draw the full parameter with torch's
default rule for the dense module (nn.Linear, nn.Embedding) from the current
RNG and keep their slice: the members of a set must construct them with the
same RNG state (torch.manual_seed(seed) on every rank), and then hold exactly
the slices of the dense module the same seed builds. ``from_dense`` copies
the slices of a given dense module instead. docs/tensor-parallel.md has the
tables of collectives and shard layouts.
"""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from hvd.common.process_sets import ProcessSet
from hvd.torch import mpi_ops

ATTR = 'hvd_tensor_parallel'

# Payload bytes and op counts this process handed to tensor-parallel
# collectives (its own input tensor's size per op), by kind.
_stats = {'allreduce': [0, 0], 'allgather': [0, 0]}


def collective_stats():
    """{kind: (ops, payload bytes)} issued by this module in this process
    since the last reset_collective_stats(): kinds 'allreduce' and
    'allgather'; the bytes are each op's input tensor on this rank."""
    return {k: tuple(v) for k, v in _stats.items()}


def reset_collective_stats():
    for v in _stats.values():
        v[0] = v[1] = 0


def describe_set(process_set):
    """'process set 1 [0 1]': how errors name a set."""
    ranks = process_set.ranks if process_set.ranks is not None else []
    return 'process set %s [%s]' % (process_set.process_set_id, ' '.join(str(r) for r in ranks))


def shard_info(process_set, what='tensor_parallel'):
    """(index, count): this process's member index in the set and the set's
    size; ValueError naming what and the set when process_set is not a
    registered ProcessSet or this process is not one of its members."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError('%s: process_set must be an hvd ProcessSet, not %r' % (what, process_set))
    if process_set.process_set_id is None or process_set.ranks is None:
        raise ValueError('%s: %s is not registered (pass it to hvd.init(process_sets=[...]) or '
                         'hvd.add_process_set())' % (what, process_set))
    me = mpi_ops.rank()
    if me not in process_set.ranks:
        raise ValueError('%s: this process (rank %d) is not a member of the tensor-parallel %s'
                         % (what, me, describe_set(process_set)))
    return process_set.ranks.index(me), len(process_set.ranks)


def _divide(what, name, value, count, process_set):
    if value % count:
        raise ValueError('%s: %s %d is not divisible by the tensor-parallel size %d (%s)'
                         % (what, name, value, count, describe_set(process_set)))
    return value // count


def _allreduce(tensor, op, process_set):
    _stats['allreduce'][0] += 1
    _stats['allreduce'][1] += tensor.numel() * tensor.element_size()
    return mpi_ops.allreduce(tensor, op=op, process_set=process_set)


def _allgather(tensor, dim, process_set):
    """Concatenation of every member's equal-shaped tensor along dim."""
    _stats['allgather'][0] += 1
    _stats['allgather'][1] += tensor.numel() * tensor.element_size()
    dim = dim % tensor.dim()
    if dim == 0:
        return mpi_ops.synchronize(mpi_ops.allgather_async(tensor.contiguous(), process_set=process_set))
    out = mpi_ops.synchronize(mpi_ops.allgather_async(tensor.movedim(dim, 0).contiguous(), process_set=process_set))
    return out.movedim(0, dim).contiguous()


def _chunk(tensor, dim, index, count):
    return tensor.chunk(count, dim)[index].contiguous() if count > 1 else tensor


# ------------------------------------------------------- autograd primitives

class _CopyTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, process_set):
        ctx.process_set = process_set
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _allreduce(grad, mpi_ops.Sum, ctx.process_set), None


class _ReduceFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, process_set):
        return _allreduce(x, mpi_ops.Sum, process_set)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ScatterTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, process_set, dim, index, count):
        ctx.process_set, ctx.dim = process_set, dim
        return _chunk(x, dim, index, count)

    @staticmethod
    def backward(ctx, grad):
        return _allgather(grad, ctx.dim, ctx.process_set), None, None, None, None


class _GatherFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, process_set, dim, index, count):
        ctx.dim, ctx.index, ctx.count = dim, index, count
        return _allgather(x, dim, process_set)

    @staticmethod
    def backward(ctx, grad):
        return _chunk(grad, ctx.dim, ctx.index, ctx.count), None, None, None, None


def copy_to_tensor_parallel(x, process_set):
    """x unchanged; backward sums the gradient over the set (the input of
    column-parallel layers, whose shards each see all of x)."""
    _, count = shard_info(process_set, 'copy_to_tensor_parallel')
    return x if count == 1 else _CopyTo.apply(x, process_set)


def reduce_from_tensor_parallel(x, process_set):
    """Sum of x over the set; backward passes the gradient through (the
    output of row-parallel layers, whose shards each hold a partial sum)."""
    _, count = shard_info(process_set, 'reduce_from_tensor_parallel')
    return x if count == 1 else _ReduceFrom.apply(x, process_set)


def _check_split(what, x, dim, count, process_set):
    if x.dim() == 0:
        raise ValueError('%s: cannot split a 0-dimensional tensor' % what)
    _divide(what, 'dimension %d of size' % dim, x.shape[dim], count, process_set)


def scatter_to_tensor_parallel(x, process_set, dim=-1):
    """This member's chunk of x along dim (x is the same on every member);
    backward gathers the gradient's chunks. ValueError when x.shape[dim] is
    not divisible by the set's size."""
    index, count = shard_info(process_set, 'scatter_to_tensor_parallel')
    if count == 1:
        return x
    _check_split('scatter_to_tensor_parallel', x, dim, count, process_set)
    return _ScatterTo.apply(x, process_set, dim, index, count)


def gather_from_tensor_parallel(x, process_set, dim=-1):
    """Every member's x concatenated along dim in member order (all
    members' x must have the same shape); backward keeps this member's
    chunk of the gradient."""
    index, count = shard_info(process_set, 'gather_from_tensor_parallel')
    if count == 1:
        return x
    if x.dim() == 0:
        raise ValueError('gather_from_tensor_parallel: cannot gather 0-dimensional tensors')
    return _GatherFrom.apply(x, process_set, dim, index, count)


# ------------------------------------------------------------------ layers

def _mark(param, dim, index, count):
    setattr(param, ATTR, (dim, index, count))
    return param


def _dense_linear_init(in_features, out_features, bias, dtype):
    """nn.Linear's default init of the full weight and bias, in its RNG order."""
    w = torch.empty(out_features, in_features, dtype=dtype)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    b = None
    if bias:
        b = torch.empty(out_features, dtype=dtype)
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        nn.init.uniform_(b, -bound, bound)
    return w, b


def _param(tensor, device):
    return nn.Parameter(tensor.detach().clone().to(device))


class ColumnParallelLinear(nn.Module):
    """y = x A^T + b with A's rows (the output features) split over the set:
    this member holds weight [out/T, in] and bias [out/T] (both marked
    hvd_tensor_parallel = (0, index, T)). forward(x [..., in]) returns this
    member's output chunk [..., out/T], or all of [..., out] with
    gather_output."""

    def __init__(self, in_features, out_features, process_set, bias=True, gather_output=False, dtype=None,
                 device=None, _init=True):
        super().__init__()
        what = type(self).__name__
        self.index, self.count = shard_info(process_set, what)
        self.process_set = process_set
        self.in_features, self.out_features = in_features, out_features
        self.out_per_shard = _divide(what, 'out_features', out_features, self.count, process_set)
        self.gather_output = gather_output
        dtype = dtype or torch.get_default_dtype()
        if _init:
            w, b = _dense_linear_init(in_features, out_features, bias, dtype)
            self.set_shards(w, b, device)
        else:
            self.weight = None
            self.register_parameter('bias', None)

    def set_shards(self, weight, bias, device=None):
        """Keeps this member's rows of the full weight [out, in] and bias [out]."""
        self.weight = _mark(_param(_chunk(weight, 0, self.index, self.count), device), 0, self.index, self.count)
        if bias is not None:
            self.bias = _mark(_param(_chunk(bias, 0, self.index, self.count), device), 0, self.index, self.count)
        else:
            self.register_parameter('bias', None)

    @classmethod
    def from_dense(cls, linear, process_set, gather_output=False):
        """This member's slice of an nn.Linear (copied)."""
        m = cls(linear.in_features, linear.out_features, process_set, bias=linear.bias is not None,
                gather_output=gather_output, _init=False)
        m.set_shards(linear.weight, linear.bias, linear.weight.device)
        return m

    def local(self, x):
        """The local linear alone (no collective): for an input already
        passed through copy_to_tensor_parallel."""
        return F.linear(x, self.weight, self.bias)

    def forward(self, x):
        y = self.local(copy_to_tensor_parallel(x, self.process_set))
        return gather_from_tensor_parallel(y, self.process_set, -1) if self.gather_output else y

    def extra_repr(self):
        return 'in_features=%d, out_features=%d (%d per shard, shard %d of %d), bias=%s, gather_output=%s' % (
            self.in_features, self.out_features, self.out_per_shard, self.index, self.count, self.bias is not None,
            self.gather_output)


class RowParallelLinear(nn.Module):
    """y = x A^T + b with A's columns (the input features) split over the
    set: this member holds weight [out, in/T] (marked (1, index, T)) and the
    whole bias [out] (replicated, unmarked). forward(x) takes this member's
    input chunk [..., in/T] (input_is_parallel, the default) or the whole
    [..., in] (then scattered), and returns the whole output [..., out]."""

    def __init__(self, in_features, out_features, process_set, bias=True, input_is_parallel=True, dtype=None,
                 device=None, _init=True):
        super().__init__()
        what = type(self).__name__
        self.index, self.count = shard_info(process_set, what)
        self.process_set = process_set
        self.in_features, self.out_features = in_features, out_features
        self.in_per_shard = _divide(what, 'in_features', in_features, self.count, process_set)
        self.input_is_parallel = input_is_parallel
        dtype = dtype or torch.get_default_dtype()
        if _init:
            w, b = _dense_linear_init(in_features, out_features, bias, dtype)
            self.set_shards(w, b, device)
        else:
            self.weight = None
            self.register_parameter('bias', None)

    def set_shards(self, weight, bias, device=None):
        """Keeps this member's columns of the full weight [out, in] and all of bias."""
        self.weight = _mark(_param(_chunk(weight, 1, self.index, self.count), device), 1, self.index, self.count)
        if bias is not None:
            self.bias = _param(bias, device)
        else:
            self.register_parameter('bias', None)

    @classmethod
    def from_dense(cls, linear, process_set, input_is_parallel=True):
        """This member's slice of an nn.Linear (copied)."""
        m = cls(linear.in_features, linear.out_features, process_set, bias=linear.bias is not None,
                input_is_parallel=input_is_parallel, _init=False)
        m.set_shards(linear.weight, linear.bias, linear.weight.device)
        return m

    def forward(self, x):
        if not self.input_is_parallel:
            x = scatter_to_tensor_parallel(x, self.process_set, -1)
        y = reduce_from_tensor_parallel(F.linear(x, self.weight), self.process_set)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return 'in_features=%d (%d per shard, shard %d of %d), out_features=%d, bias=%s, input_is_parallel=%s' % (
            self.in_features, self.in_per_shard, self.index, self.count, self.out_features, self.bias is not None,
            self.input_is_parallel)


def _check_ids(what, ids, num):
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError('%s: ids must be int64 or int32, not %s' % (what, ids.dtype))
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= num:
            raise ValueError('%s: id %d is outside the vocabulary [0, %d)' % (what, lo if lo < 0 else hi, num))


class VocabParallelEmbedding(nn.Module):
    """An embedding table [V, D] whose rows (the vocabulary) are split over
    the set: this member holds rows [index*V/T, (index+1)*V/T) (weight marked
    (0, index, T)). forward(ids) looks up the ids it owns, zeroes the rest,
    and sums over the set: every member gets the whole [..., D]."""

    def __init__(self, num_embeddings, embedding_dim, process_set, dtype=None, device=None, _init=True):
        super().__init__()
        what = type(self).__name__
        self.index, self.count = shard_info(process_set, what)
        self.process_set = process_set
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.per_shard = _divide(what, 'num_embeddings', num_embeddings, self.count, process_set)
        self.vocab_start = self.index * self.per_shard
        self.vocab_end = self.vocab_start + self.per_shard
        if _init:
            w = torch.empty(num_embeddings, embedding_dim, dtype=dtype or torch.get_default_dtype())
            nn.init.normal_(w)
            self.set_shard(w, device)
        else:
            self.weight = None

    def set_shard(self, weight, device=None):
        """Keeps this member's rows of the full table [V, D]."""
        self.weight = _mark(_param(_chunk(weight, 0, self.index, self.count), device), 0, self.index, self.count)

    @classmethod
    def from_dense(cls, embedding, process_set):
        """This member's rows of an nn.Embedding (copied; padding_idx,
        max_norm and the like are not supported)."""
        m = cls(embedding.num_embeddings, embedding.embedding_dim, process_set, _init=False)
        m.set_shard(embedding.weight, embedding.weight.device)
        return m

    def forward(self, ids):
        what = type(self).__name__
        _check_ids(what, ids, self.num_embeddings)
        if self.count == 1:
            return F.embedding(ids, self.weight)
        outside = (ids < self.vocab_start) | (ids >= self.vocab_end)
        local = (ids - self.vocab_start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0)
        return reduce_from_tensor_parallel(out, self.process_set)

    def extra_repr(self):
        return '%d, %d (rows [%d, %d), shard %d of %d)' % (self.num_embeddings, self.embedding_dim, self.vocab_start,
                                                        self.vocab_end, self.index, self.count)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, process_set, index, count, ignore_index):
        per_shard = logits.shape[-1]
        start = index * per_shard
        ignored = target == ignore_index
        target = target.masked_fill(ignored, start)  # any id, its loss and gradient are zeroed below
        logits_max = logits.max(dim=-1)[0]
        if count > 1:
            logits_max = _allreduce(logits_max, mpi_ops.Max, process_set)
        shifted = logits - logits_max.unsqueeze(-1)
        outside = (target < start) | (target >= start + per_shard)
        local = (target - start).masked_fill(outside, 0)
        picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        if count > 1:  # one allreduce for both sums
            both = _allreduce(torch.stack([sum_exp, picked]), mpi_ops.Sum, process_set)
            sum_exp, picked = both[0], both[1]
        loss = (sum_exp.log() - picked).masked_fill(ignored, 0)
        exp.div_(sum_exp.unsqueeze(-1))  # softmax
        ctx.save_for_backward(exp, local, outside | ignored, ignored)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, local, not_here, ignored = ctx.saved_tensors
        g = softmax.clone()
        onehot = torch.zeros_like(g).scatter_(-1, local.unsqueeze(-1), 1.0)
        g.sub_(onehot.mul_((~not_here).unsqueeze(-1).to(g.dtype)))
        g.mul_(grad.masked_fill(ignored, 0).unsqueeze(-1))
        return g, None, None, None, None, None


def vocab_parallel_cross_entropy(logits, target, process_set, ignore_index=-100):
    """Per-token cross entropy [...] of logits split over the vocabulary:
    logits [..., V/T] are this member's chunk (vocabulary ids [index*V/T,
    (index+1)*V/T)), target [...] holds global ids in [0, V). Equal to
    F.cross_entropy(full_logits.view(-1, V), target.view(-1),
    reduction='none', ignore_index=ignore_index) viewed as [...]; tokens whose
    target is ignore_index get loss 0 and no gradient. Numerically stable
    (max allreduce, then one sum allreduce); the gradient of the chunk is
    (softmax - one-hot) on the member owning the target."""
    index, count = shard_info(process_set, 'vocab_parallel_cross_entropy')
    if logits.dim() < 1 or tuple(logits.shape[:-1]) != tuple(target.shape):
        raise ValueError('vocab_parallel_cross_entropy: logits %s must be target %s plus the vocabulary dimension'
                         % (tuple(logits.shape), tuple(target.shape)))
    if target.dtype != torch.int64:
        raise ValueError('vocab_parallel_cross_entropy: target must be int64, not %s' % target.dtype)
    vocab = logits.shape[-1] * count
    kept = target[target != ignore_index]
    _check_ids('vocab_parallel_cross_entropy', kept, vocab)
    return _VocabParallelCrossEntropy.apply(logits, target, process_set, index, count, ignore_index)


def parallel_lm_logits(hidden, weight, process_set, bias=None):
    """This member's logits chunk [..., V/T] = copy_to(hidden) @ weight^T
    (+ bias [V/T]) for a vocabulary-parallel output layer whose weight
    [V/T, H] is a VocabParallelEmbedding's (tied) or a
    ColumnParallelLinear(H, V, bias=False)'s."""
    return F.linear(copy_to_tensor_parallel(hidden, process_set), weight, bias)


def _causal_attention(q, k, v):
    """softmax(q k^T / sqrt(d) + causal mask) v on [B, heads, S, d]."""
    s = q.shape[-2]
    att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return att.masked_fill(mask, float('-inf')).softmax(dim=-1) @ v


class ParallelSelfAttention(nn.Module):
    """Causal self-attention with the heads split over the set: member t
    computes heads [t*heads/T, (t+1)*heads/T). q, k, v are column-parallel
    (their rows for those heads), proj is row-parallel. forward(x [B, S, H])
    returns the whole [B, S, H] on every member: one allreduce forward (proj)
    and one backward (the input)."""

    def __init__(self, hidden, heads, process_set, dtype=None, device=None, _init=True):
        super().__init__()
        what = type(self).__name__
        self.index, self.count = shard_info(process_set, what)
        if heads <= 0 or hidden % heads:
            raise ValueError('%s: hidden %d is not divisible by heads %d' % (what, hidden, heads))
        self.process_set = process_set
        self.hidden, self.heads = hidden, heads
        self.local_heads = _divide(what, 'heads', heads, self.count, process_set)
        self.head_dim = hidden // heads
        for name in ('q', 'k', 'v'):
            setattr(self, name, ColumnParallelLinear(hidden, hidden, process_set, dtype=dtype, device=device,
                                                     _init=_init))
        self.proj = RowParallelLinear(hidden, hidden, process_set, dtype=dtype, device=device, _init=_init)

    @classmethod
    def from_dense(cls, attn, process_set):
        """This member's heads of a dense attention module (attributes q, k,
        v, proj: nn.Linear(hidden, hidden); heads), copied."""
        m = cls(attn.q.in_features, attn.heads, process_set, _init=False)
        for name in ('q', 'k', 'v'):
            d = getattr(attn, name)
            getattr(m, name).set_shards(d.weight, d.bias, d.weight.device)
        m.proj.set_shards(attn.proj.weight, attn.proj.bias, attn.proj.weight.device)
        return m

    def forward(self, x):
        b, s, _ = x.shape
        x = copy_to_tensor_parallel(x, self.process_set)

        def heads(lin):
            return lin.local(x).view(b, s, self.local_heads, self.head_dim).transpose(1, 2)

        y = _causal_attention(heads(self.q), heads(self.k), heads(self.v))
        return self.proj(y.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim))

    def extra_repr(self):
        return 'hidden=%d, heads=%d (%d per shard, shard %d of %d)' % (self.hidden, self.heads, self.local_heads,
                                                                       self.index, self.count)


class ParallelMLP(nn.Module):
    """proj(act(fc(x))) with fc column-parallel (ffn/T features per member)
    and proj row-parallel: one allreduce forward, one backward."""

    def __init__(self, hidden, ffn, process_set, dtype=None, device=None, _init=True, act=None):
        super().__init__()
        _, count = shard_info(process_set, type(self).__name__)
        _divide(type(self).__name__, 'ffn', ffn, count, process_set)
        self.fc = ColumnParallelLinear(hidden, ffn, process_set, dtype=dtype, device=device, _init=_init)
        self.act = act if act is not None else nn.GELU()
        self.proj = RowParallelLinear(ffn, hidden, process_set, dtype=dtype, device=device, _init=_init)

    @classmethod
    def from_dense(cls, mlp, process_set):
        """This member's slice of a dense MLP (attributes fc, act, proj)."""
        m = cls(mlp.fc.in_features, mlp.fc.out_features, process_set, _init=False, act=copy.deepcopy(mlp.act))
        m.fc.set_shards(mlp.fc.weight, mlp.fc.bias, mlp.fc.weight.device)
        m.proj.set_shards(mlp.proj.weight, mlp.proj.bias, mlp.proj.weight.device)
        return m

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))
