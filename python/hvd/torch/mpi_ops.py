"""Collectives on torch tensors (horovod.torch.mpi_ops), on libhvd.so.

CPU tensors are passed to the engine by address (tensor.data_ptr()): the
engine reads inputs and writes allreduce and broadcast outputs in the
tensors' own memory, without copies. Allgather, alltoall and reducescatter
outputs (whose shapes only negotiation knows) are copied once from the
engine into a new tensor. Non-contiguous tensors are made contiguous first
(and in-place ops copy the result back). Every tensor an op uses stays
referenced until synchronize() returns. Waiting releases the GIL.
"""

import torch

from hvd.common import _abi
from hvd.common.basics import HorovodBasics as _HorovodBasics
from hvd.common.basics import (init, shutdown, is_initialized, start_timeline, stop_timeline, size, local_size,
                               cross_size, rank, local_rank, cross_rank, is_homogeneous, mpi_threads_supported,
                               mpi_enabled, mpi_built, gloo_enabled, gloo_built, nccl_built, ddl_built, ccl_built,
                               cuda_built, rocm_built)
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hvd.common.process_sets import (ProcessSet, global_process_set, add_process_set, remove_process_set,
                                     _set_id)
from hvd.torch.compression import Compression

# Reduction ops, with Horovod's values.
from hvd.common.ops import (Average, Sum, Adasum, Min, Max, Product,  # noqa: E402,F401
                            handle_average_backwards_compatibility, check_adasum, op_name)

# Horovod's HorovodBasics object, which tests written for Horovod reach into
# (hvd.mpi_ops._basics._get_process_set_ids_and_ranks()).
_basics = _HorovodBasics()

_DTYPES = {
    torch.uint8: _abi.DTYPE_UINT8,
    torch.int8: _abi.DTYPE_INT8,
    torch.int16: _abi.DTYPE_INT16,
    torch.int32: _abi.DTYPE_INT32,
    torch.int64: _abi.DTYPE_INT64,
    torch.float16: _abi.DTYPE_FLOAT16,
    torch.bfloat16: _abi.DTYPE_BFLOAT16,
    torch.float32: _abi.DTYPE_FLOAT32,
    torch.float64: _abi.DTYPE_FLOAT64,
    torch.bool: _abi.DTYPE_BOOL,
}



def _check_tensor(tensor, what='tensor'):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError('%s must be a torch.Tensor, not %s' % (what, type(tensor).__name__))
    if tensor.device.type != 'cpu':
        raise ValueError('hvd: %s is on %s; this build of hvd supports CPU tensors only' % (what, tensor.device))
    if tensor.layout != torch.strided:
        raise ValueError('hvd: %s has layout %s; use sparse_allreduce_async for sparse tensors' % (what, tensor.layout))
    if tensor.dtype not in _DTYPES:
        raise ValueError('Tensor type %s is not supported.' % tensor.dtype)


def _contig(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _desc(tensor):
    return tensor.data_ptr(), _DTYPES[tensor.dtype], list(tensor.shape)


from hvd.common.handles import track as _track, _handle_map  # noqa: E402,F401


def _check_op(op, process_set):
    if isinstance(op, bool) or op not in (Average, Sum, Adasum, Min, Max, Product):
        raise ValueError('unknown reduce op %r: use hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max or hvd.Product' % (op,))
    if op == Adasum:
        check_adasum(_set_id(process_set), size())


def _copy_back(dst, src):
    """For in-place ops on non-contiguous tensors: the op ran on a contiguous
    copy; write its result into the caller's tensor."""
    if dst is not src:
        dst.copy_(src)
    return dst


# ---------------------------------------------------------------- allreduce

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    _check_tensor(tensor)
    _check_op(op, process_set)
    src = _contig(tensor)
    if output is tensor:
        out = src  # in place
    else:
        out = torch.empty_like(src, memory_format=torch.contiguous_format)
    ptr, dt, shape = _desc(src)
    handle = _abi.allreduce_async(ptr, out.data_ptr(), dt, shape, op, float(prescale_factor), float(postscale_factor),
                                  _set_id(process_set), name)
    if output is tensor:
        return _track(handle, (tensor, src), lambda: _copy_back(tensor, src))
    return _track(handle, (tensor, src, out), lambda: out)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Asynchronously averages (or reduces with op) the tensor over the
    process set; returns a handle for poll() and synchronize(), whose result
    is a new tensor (the input is not modified)."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor, process_set)


class HorovodAllreduce(torch.autograd.Function):
    """An autograd function that performs allreduce on a tensor."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        return allreduce(grad_output, average=ctx.average, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set), None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Averages (or reduces with op) the tensor over the process set and
    returns the result as a new tensor; differentiable (the gradient is the
    allreduce of the gradient with the same op)."""
    tensor_compressed, ctx = compression.compress(tensor)
    summed_tensor_compressed = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor,
                                                      postscale_factor, process_set)
    return compression.decompress(summed_tensor_compressed, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place allreduce_async: the result is written into tensor."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns tensor."""
    handle = allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set)
    return synchronize(handle)


# -------------------------------------------------------- grouped allreduce

def _check_group(tensors):
    if not isinstance(tensors, (list, tuple)) or len(tensors) == 0:
        raise ValueError('expected a non-empty list of tensors')
    for i, t in enumerate(tensors):
        _check_tensor(t, 'tensors[%d]' % i)


def _group_desc(ts):
    ptrs, dtypes, ndims, shapes = [], [], [], []
    for t in ts:
        ptrs.append(t.data_ptr())
        dtypes.append(_DTYPES[t.dtype])
        ndims.append(t.dim())
        shapes.extend(t.shape)
    return ptrs, dtypes, ndims, shapes


def _grouped_allreduce_async(tensors, in_place, name, op, prescale_factor, postscale_factor, process_set):
    _check_group(tensors)
    _check_op(op, process_set)
    srcs = [_contig(t) for t in tensors]
    outs = srcs if in_place else [torch.empty_like(s, memory_format=torch.contiguous_format) for s in srcs]
    ptrs, dtypes, ndims, shapes = _group_desc(srcs)
    handle = _abi.grouped_allreduce_async(ptrs, [o.data_ptr() for o in outs], dtypes, ndims, shapes, op,
                                          float(prescale_factor), float(postscale_factor), _set_id(process_set),
                                          name)
    if in_place:
        return _track(handle, (list(tensors), srcs),
                      lambda: [_copy_back(t, s) for t, s in zip(tensors, srcs)])
    return _track(handle, (list(tensors), srcs, outs), lambda: list(outs))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Asynchronously allreduces a list of tensors as one group (negotiated
    together, fused when they fit); synchronize returns a list."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, False, name, op, prescale_factor, postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """An autograd function that performs allreduce on a list of tensors."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor, postscale_factor,
                                         process_set)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                         prescale_factor=ctx.prescale_factor,
                                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grad_reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of tensors as one group; returns a list of new
    tensors; differentiable."""
    tensors_compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    summed = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                           *tensors_compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(summed, ctxs)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place grouped_allreduce_async."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, True, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the tensors."""
    handle = grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    return synchronize(handle)


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

def _engine_output(handle, index, dtype):
    shape = _abi.handle_output_shape(handle, index)
    out = torch.empty(shape, dtype=dtype)
    _abi.handle_output_copy(handle, index, out.data_ptr(), out.numel() * out.element_size())
    return out


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronously concatenates the tensor of every member of the set
    along dimension 0 (which may differ per rank)."""
    _check_tensor(tensor)
    src = _contig(tensor)
    ptr, dt, shape = _desc(src)
    handle = _abi.allgather_async(ptr, dt, shape, _set_id(process_set), name)
    return _track(handle, (tensor, src), lambda: _engine_output(handle, 0, tensor.dtype))


class HorovodAllgather(torch.autograd.Function):
    """An autograd function that performs allgather on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 0  # 0-dim: allgather_async raises
        ctx.process_set = process_set
        handle = allgather_async(tensor, name, process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dim_t = torch.IntTensor([ctx.dim])
        dim = allgather(dim_t, process_set=ctx.process_set).view(ctx.process_set.size())
        r = ctx.process_set.rank()
        offset = torch.sum(dim.narrow(0, 0, r)).item() if r != 0 else 0
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates the tensor of every member along dimension 0; returns a
    new tensor; differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronously allgathers a list of tensors as one group."""
    _check_group(tensors)
    srcs = [_contig(t) for t in tensors]
    ptrs, dtypes, ndims, shapes = _group_desc(srcs)
    handle = _abi.grouped_allgather_async(ptrs, dtypes, ndims, shapes, _set_id(process_set), name)
    return _track(handle, (list(tensors), srcs),
                  lambda: [_engine_output(handle, i, t.dtype) for i, t in enumerate(tensors)])


class HorovodGroupedAllgather(torch.autograd.Function):
    """An autograd function that performs allgather on a list of tensors."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        handle = grouped_allgather_async(list(tensors), name, process_set)
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
        return (None, None, *grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors as one group; returns a list;
    differentiable."""
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---------------------------------------------------------------- broadcast

def _broadcast_async(tensor, root_rank, name, process_set, in_place):
    _check_tensor(tensor)
    if in_place:
        buf = _contig(tensor)
    else:
        buf = tensor.clone(memory_format=torch.contiguous_format)
    ptr, dt, shape = _desc(buf)
    handle = _abi.broadcast_async(ptr, dt, shape, int(root_rank), _set_id(process_set), name)
    if in_place:
        return _track(handle, (tensor, buf), lambda: _copy_back(tensor, buf))
    return _track(handle, (tensor, buf), lambda: buf)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronously broadcasts root_rank's tensor (root_rank is a global
    rank, a member of the set); the result is a new tensor."""
    return _broadcast_async(tensor, root_rank, name, process_set, False)


class HorovodBroadcast(torch.autograd.Function):
    """An autograd function that broadcasts a tensor."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        handle = broadcast_async(tensor, root_rank, name, process_set)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every member; differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast_async."""
    return _broadcast_async(tensor, root_rank, name, process_set, True)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns tensor."""
    handle = broadcast_async_(tensor, root_rank, name, process_set)
    return synchronize(handle)


# ----------------------------------------------------------------- alltoall

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronously sends splits[i] rows of tensor (dimension 0, in order)
    to the i-th member of the set; without splits dimension 0 is divided
    evenly. synchronize returns (output, received_splits)."""
    _check_tensor(tensor)
    if splits is not None:
        if isinstance(splits, torch.Tensor):
            if splits.dtype != torch.int32:
                raise ValueError('splits must be an int32 tensor, not %s' % splits.dtype)
            if splits.dim() != 1:
                raise ValueError('splits must be a 1-D tensor, not %d-D' % splits.dim())
            splits = splits.cpu().tolist()
        else:
            splits = list(splits)
            for s in splits:
                if isinstance(s, bool) or not isinstance(s, int):
                    raise ValueError('splits must be integers, got %r' % (s,))
    src = _contig(tensor)
    ptr, dt, shape = _desc(src)
    handle = _abi.alltoall_async(ptr, dt, shape, splits, _set_id(process_set), name)

    def result():
        out = _engine_output(handle, 0, tensor.dtype)
        rs = torch.tensor(_abi.handle_received_splits(handle), dtype=torch.int32)
        return out, rs

    return _track(handle, (tensor, src), result)


class HorovodAlltoall(torch.autograd.Function):
    """An autograd function that performs alltoall on a tensor."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        handle = alltoall_async(tensor, splits, name, process_set)
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
        return grad_wrt_tensor, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Alltoall; returns the output, or (output, received_splits) when
    splits is given; differentiable."""
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ------------------------------------------------------------ reducescatter

def _check_scatter_op(op):
    if op == Adasum:
        raise NotImplementedError('Reducescatter does not support Adasum; use op=hvd.Average or hvd.Sum')
    if op not in (Average, Sum):
        raise ValueError('Reducescatter only supports AVERAGE and SUM ops, not %s' % op_name(op))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronously reduces the tensor over the set and scatters the rows:
    rank r gets d0//n + 1 rows if r < d0 % n, else d0//n."""
    _check_tensor(tensor)
    _check_scatter_op(op)
    src = _contig(tensor)
    ptr, dt, shape = _desc(src)
    handle = _abi.reducescatter_async(ptr, dt, shape, op, float(prescale_factor), float(postscale_factor),
                                      _set_id(process_set), name)
    return _track(handle, (tensor, src), lambda: _engine_output(handle, 0, tensor.dtype))


class HorovodReducescatter(torch.autograd.Function):
    """An autograd function that performs reducescatter on a tensor."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        handle = reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)
        return synchronize(handle)

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.op == Sum:
            grad_output = grad_output * ctx.process_set.size()
        if ctx.prescale_factor != 1.0:
            grad_output = grad_output * ctx.prescale_factor
        if ctx.postscale_factor != 1.0:
            grad_output = grad_output * ctx.postscale_factor
        return allgather(grad_output, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter; returns this rank's rows of the reduction;
    differentiable."""
    tensor_compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(tensor_compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronously reducescatters a list of tensors as one group."""
    _check_group(tensors)
    _check_scatter_op(op)
    srcs = [_contig(t) for t in tensors]
    ptrs, dtypes, ndims, shapes = _group_desc(srcs)
    handle = _abi.grouped_reducescatter_async(ptrs, dtypes, ndims, shapes, op, float(prescale_factor),
                                              float(postscale_factor), _set_id(process_set), name)
    return _track(handle, (list(tensors), srcs),
                  lambda: [_engine_output(handle, i, t.dtype) for i, t in enumerate(tensors)])


class HorovodGroupedReducescatter(torch.autograd.Function):
    """An autograd function that performs reducescatter on a list of tensors."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        handle = grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                             postscale_factor)
        return tuple(synchronize(handle))

    @staticmethod
    def backward(ctx, *grad_output):
        scale = 1.0
        if ctx.op == Sum:
            scale *= ctx.process_set.size()
        scale *= ctx.prescale_factor * ctx.postscale_factor
        grads = [g * scale if scale != 1.0 else g for g in grad_output]
        return (None, None, None, None, None, *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters a list of tensors as one group; differentiable."""
    tensors_compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                             *tensors_compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(outs, ctxs)]


# ------------------------------------------------ handles, join and barrier

from hvd.common.handles import poll, synchronize, join, barrier  # noqa: E402,F401
