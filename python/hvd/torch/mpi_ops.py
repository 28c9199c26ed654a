"""Collectives on torch tensors (horovod.torch.mpi_ops), on libhvd.so.

The work is hvd.common.collectives', bound to torch tensors in tensors.py;
this module gives it Horovod's signatures and adds autograd: allreduce,
allgather, broadcast, alltoall and reducescatter (and their grouped forms)
are differentiable, as in Horovod.

CPU tensors are passed to the engine by address (tensor.data_ptr()): the
engine reads inputs and writes allreduce and broadcast outputs in the
tensors' own memory, without copies. Allgather, alltoall and reducescatter
outputs (whose shapes only negotiation knows) are copied once from the
engine into a new tensor. Non-contiguous tensors are made contiguous first
(and in-place ops copy the result back). Every tensor an op uses stays
referenced until synchronize() returns. Waiting releases the GIL.
"""

import os

import torch

from hvd.common import basics as _common
from hvd.common.basics import HorovodBasics as _HorovodBasics
from hvd.common.basics import (shutdown, is_initialized, start_timeline, stop_timeline, size,  # noqa: F401
                               local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
                               mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built, nccl_built,
                               ddl_built, ccl_built, cuda_built, rocm_built)
from hvd.common.collectives import barrier, join  # noqa: F401
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from hvd.common.handles import handle_map as _handle_map  # noqa: F401  (Horovod's mpi_ops._handle_map)
from hvd.common import fastpath as _fastpath
from hvd.common.handles import poll, synchronize  # noqa: F401
from hvd.common.ops import (Average, Sum, Adasum, Min, Max, Product,  # noqa: F401
                            handle_average_backwards_compatibility)
from hvd.common.process_sets import ProcessSet, global_process_set, add_process_set, remove_process_set  # noqa: F401
from hvd.torch.compression import Compression
from hvd.torch.tensors import c_path as _fp
from hvd.torch.tensors import collectives as _c

# Horovod's HorovodBasics object, which tests written for Horovod reach into
# (hvd.mpi_ops._basics._get_process_set_ids_and_ranks()).
_basics = _HorovodBasics()


def init(comm=None, process_sets=None):
    """hvd.init() (hvd.common.basics.init); then, when the rank now runs on
    fewer CPUs than torch has intra-op threads (hvdrun bound it to one core:
    --bind-to core, or auto with one rank per CPU), torch's threads are cut
    to the CPUs it may use: threads beyond them only take turns on the same
    core. torch sized its pool at import, before the rank was bound."""
    _common.init(comm, process_sets)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return
    if 0 < cpus < torch.get_num_threads():
        torch.set_num_threads(cpus)


# ---------------------------------------------------------------- allreduce

def _needs_grad(tensor):
    """Whether an op on tensor must be recorded for autograd (else the
    autograd functions below can be skipped: same result, no graph)."""
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set, priority=0):
    """Asynchronously averages (or reduces with op) the tensor over the
    process set; returns a handle for poll() and synchronize(), whose result
    is a new tensor (the input is not modified). priority (hvd's addition,
    every collective takes it): among the tensors ready at the same time,
    higher priorities are negotiated, fused and executed first; 0 keeps
    Horovod's order."""
    return _c.allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set, priority)


class HorovodAllreduce(torch.autograd.Function):
    """An autograd function that performs allreduce on a tensor."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set, priority=0):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        ctx.priority = priority
        # One library call: the calling thread runs the round when it can.
        return _c.allreduce_sync(tensor, average, name, op, prescale_factor, postscale_factor, process_set, priority)

    @staticmethod
    def backward(ctx, grad_output):
        return allreduce(grad_output, average=ctx.average, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set,
                         priority=ctx.priority), None, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, priority=0):
    """Averages (or reduces with op) the tensor over the process set and
    returns the result as a new tensor; differentiable (the gradient is the
    allreduce of the gradient with the same op)."""
    tensor_compressed, ctx = compression.compress(tensor)
    if _needs_grad(tensor_compressed):
        summed_tensor_compressed = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor,
                                                          postscale_factor, process_set, priority)
    else:  # no graph to record: the autograd function's forward without its bookkeeping (~1.5 µs)
        summed_tensor_compressed = _c.allreduce_sync(tensor_compressed, average, name, op, prescale_factor,
                                                     postscale_factor, process_set, priority)
    return compression.decompress(summed_tensor_compressed, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set, priority=0):
    """In-place allreduce_async: the result is written into tensor."""
    return _c.allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set, priority)


# allreduce_async_, allreduce_ and synchronize are called per tensor in
# training loops (a hook per gradient, a batch of async ops): their C forms
# (hvd/common/_fastpath.c) take a plain CPU tensor's op without a Python
# frame and hand anything else to the functions above (issue 27).
allreduce_async_ = _fastpath.entry(_fp, 'allreduce_async_', allreduce_async_, global_process_set, __name__)
synchronize = _fastpath.entry(_fp, 'synchronize', synchronize, global_process_set, __name__)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, priority=0):
    """In-place allreduce; returns tensor."""
    return _c.allreduce_(tensor, average, name, op, prescale_factor, postscale_factor, process_set, priority)


allreduce_ = _fastpath.entry(_fp, 'allreduce_', allreduce_, global_process_set, __name__)


# -------------------------------------------------------- grouped allreduce

def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set, priority=0):
    """Asynchronously allreduces a list of tensors as one group (negotiated
    together, fused when they fit); synchronize returns a list."""
    return _c.grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                                      priority)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """An autograd function that performs allreduce on a list of tensors."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, priority, *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        ctx.priority = priority
        handle = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor, postscale_factor,
                                         process_set, priority)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                         prescale_factor=ctx.prescale_factor,
                                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set,
                                         priority=ctx.priority)
        return (None, None, None, None, None, None, None, *grad_reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set, priority=0):
    """Allreduces a list of tensors as one group; returns a list of new
    tensors; differentiable."""
    tensors_compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    summed = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                           priority, *tensors_compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(summed, ctxs)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set, priority=0):
    """In-place grouped_allreduce_async."""
    return _c.grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                                       priority)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, priority=0):
    """In-place grouped allreduce; returns the tensors."""
    return _c.grouped_allreduce_(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                                 priority)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse tensor as two allgathers (indices and values);
    returns a callable that waits and returns the sparse result (values
    divided by the set size for Average)."""
    # Allgather concatenates along dimension 0: transpose the indices so
    # that they concatenate correctly, and back afterwards.
    t = tensor
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(), name='%s.indices' % name,
                                     process_set=process_set)
    values_handle = allgather_async(t._values(), name='%s.values' % name, process_set=process_set)

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        values = (values / process_set.size()) if op == Average else values
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return t.new(indices.transpose(0, 1), values, t.size())

    return handle


# ---------------------------------------------------------------- allgather

def allgather_async(tensor, name=None, process_set=global_process_set, priority=0):
    """Asynchronously concatenates the tensor of every member of the set
    along dimension 0 (which may differ per rank)."""
    return _c.allgather_async(tensor, name, process_set, priority)


class HorovodAllgather(torch.autograd.Function):
    """An autograd function that performs allgather on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, process_set, priority=0):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 0  # 0-dim: allgather_async raises
        ctx.process_set = process_set
        handle = allgather_async(tensor, name, process_set, priority)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dim_t = torch.IntTensor([ctx.dim])
        dim = allgather(dim_t, process_set=ctx.process_set).view(ctx.process_set.size())
        r = ctx.process_set.rank()
        offset = torch.sum(dim.narrow(0, 0, r)).item() if r != 0 else 0
        return grad_reduced.narrow(0, offset, ctx.dim), None, None, None


def allgather(tensor, name=None, process_set=global_process_set, priority=0):
    """Concatenates the tensor of every member along dimension 0; returns a
    new tensor; differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set, priority)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set, priority=0):
    """Asynchronously allgathers a list of tensors as one group."""
    return _c.grouped_allgather_async(tensors, name, process_set, priority)


class HorovodGroupedAllgather(torch.autograd.Function):
    """An autograd function that performs allgather on a list of tensors."""

    @staticmethod
    def forward(ctx, name, process_set, priority, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        handle = grouped_allgather_async(list(tensors), name, process_set, priority)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), op=Average, process_set=ctx.process_set)
        dim_t = torch.IntTensor(ctx.dims)
        dims = allgather(dim_t.view(1, -1), process_set=ctx.process_set)
        r = ctx.process_set.rank()
        grads = []
        for i, g in enumerate(grad_reduced):
            offset = int(dims[:r, i].sum().item()) if r != 0 else 0
            grads.append(g.narrow(0, offset, ctx.dims[i]))
        return (None, None, None, *grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set, priority=0):
    """Allgathers a list of tensors as one group; returns a list;
    differentiable."""
    return list(HorovodGroupedAllgather.apply(name, process_set, priority, *tensors))


# ---------------------------------------------------------------- broadcast

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    """Asynchronously broadcasts root_rank's tensor (root_rank is a global
    rank, a member of the set); the result is a new tensor."""
    return _c.broadcast_async(tensor, root_rank, name, process_set, priority)


class HorovodBroadcast(torch.autograd.Function):
    """An autograd function that broadcasts a tensor."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set, priority=0):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        handle = broadcast_async(tensor, root_rank, name, process_set, priority)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    """Returns root_rank's tensor on every member; differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set, priority)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    """In-place broadcast_async."""
    return _c.broadcast_async_(tensor, root_rank, name, process_set, priority)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    """In-place broadcast; returns tensor."""
    return _c.broadcast_(tensor, root_rank, name, process_set, priority)


# ----------------------------------------------------------------- alltoall

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set, priority=0):
    """Asynchronously sends splits[i] rows of tensor (dimension 0, in order)
    to the i-th member of the set; without splits dimension 0 is divided
    evenly. synchronize returns (output, received_splits)."""
    return _c.alltoall_async(tensor, splits, name, process_set, priority)


class HorovodAlltoall(torch.autograd.Function):
    """An autograd function that performs alltoall on a tensor."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set, priority=0):
        handle = alltoall_async(tensor, splits, name, process_set, priority)
        output, received_splits = synchronize(handle)
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad_wrt_tensor, _ = alltoall(grad_output, splits=ctx.recvsplits, process_set=ctx.process_set)
        return grad_wrt_tensor, None, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set, priority=0):
    """Alltoall; returns the output, or (output, received_splits) when
    splits is given; differentiable."""
    return HorovodAlltoall.apply(tensor, splits, name, process_set, priority)


# ------------------------------------------------------------ reducescatter

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0, priority=0):
    """Asynchronously reduces the tensor over the set and scatters the rows:
    rank r gets d0//n + 1 rows if r < d0 % n, else d0//n."""
    return _c.reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor, priority)


class HorovodReducescatter(torch.autograd.Function):
    """An autograd function that performs reducescatter on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor, priority=0):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        handle = reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor, priority)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.op == Sum:
            grad_output = grad_output * ctx.process_set.size()
        if ctx.prescale_factor != 1.0:
            grad_output = grad_output * ctx.prescale_factor
        if ctx.postscale_factor != 1.0:
            grad_output = grad_output * ctx.postscale_factor
        return allgather(grad_output, process_set=ctx.process_set), None, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0, priority=0):
    """Reducescatter; returns this rank's rows of the reduction;
    differentiable."""
    tensor_compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(tensor_compressed, name, op, process_set, prescale_factor, postscale_factor,
                                     priority)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0, priority=0):
    """Asynchronously reducescatters a list of tensors as one group."""
    return _c.grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor, postscale_factor,
                                          priority)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """An autograd function that performs reducescatter on a list of tensors."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, priority, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        handle = grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                             postscale_factor, priority)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        scale = 1.0
        if ctx.op == Sum:
            scale *= ctx.process_set.size()
        scale *= ctx.prescale_factor * ctx.postscale_factor
        grads = [g * scale if scale != 1.0 else g for g in grad_output]
        return (None, None, None, None, None, None, *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0, priority=0):
    """Reducescatters a list of tensors as one group; differentiable."""
    tensors_compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor, priority,
                                             *tensors_compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(outs, ctxs)]
