"""hvd.mxnet: Horovod's MXNet API on hvd's Go engine.

``import hvd.mxnet as hvd`` replaces ``import horovod.mxnet as hvd``.

The source is python/hvd/mxnet; hvd-plugin-mxnet embeds it and
`hvdgen plugin install mxnet` writes it, with hvd.mxnet._plugin (the
versions and dtypes the plugin describes), into the environment.

How it runs: every collective hands its NDArrays to hvd.numpy, which runs
them through the engine in libhvd.so, the same engine as hvd.torch. CPU
NDArrays go both ways without a copy: an input is read in place (a numpy
view over the NDArray's memory, taken after MXNet's pending writes to it
finish: NDArray.wait_to_read), in-place ops (allreduce_, broadcast_) write
into the NDArray's own memory (after wait_to_write), and a new result
becomes an NDArray through DLPack (mx.nd.from_dlpack over the array the
engine wrote). Ops run synchronously, in the order they are called: the
``priority`` argument MXNet's engine uses is accepted and checked (an int)
but does not reorder anything. GPU NDArrays are copied to the host and back.

Point-to-point (hvd's, not Horovod's; see hvd.torch's for the rules):
isend/irecv return handles, send/recv block; no gradient flows through
them. isend sends a copy taken when it is called (asnumpy); irecv receives
into a host buffer and writes the NDArray when synchronize returns it.

Not provided (Horovod has them): reduce, the Adasum delta optimizer (allreduce with
op=hvd.Adasum works, through hvd.numpy), elastic training.
"""
import ctypes
import functools
import types
import warnings

import mxnet as mx
import numpy as np

import hvd.numpy as _np_ops
import hvd.mxnet._plugin as _plugin
from hvd.common import dlpack as _dlpack
from hvd.common.compression import NoneCompressor
from hvd.common.handles import convert_result as _convert_result
from hvd.numpy import mpi_ops  # noqa: F401  (hvd.mpi_ops._basics, as in horovod.mxnet)
from hvd.numpy import (init, shutdown, is_initialized, start_timeline, stop_timeline, size,  # noqa: F401
                       local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
                       mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
                       nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
                       HorovodInternalError, HostsUpdatedInterrupt,
                       ProcessSet, global_process_set, add_process_set, remove_process_set,
                       Average, Sum, Adasum, Min, Max, Product,
                       join, barrier, poll, synchronize, broadcast_object, allgather_object)

# The dtypes the plugin describes; anything else is refused with a clear error.
_DTYPES = frozenset(_plugin.DTYPES)


class EnqueueError(mx.base.MXNetError, ValueError):
    """An op refused when it is called (a bad split, a scalar to scatter, a
    rank outside the set, ...): Horovod's MXNet ops raise MXNetError there,
    hvd's collectives ValueError; this is both, so either except clause
    catches it. Errors found while the op runs stay HorovodInternalError."""


def _enqueue_errors(fn):
    """Re-raises the ValueError an op's checks raise as EnqueueError."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EnqueueError:
            raise
        except ValueError as e:
            raise EnqueueError(str(e)) from e
    return wrapper


def _check(tensor, what='tensor'):
    if not isinstance(tensor, mx.nd.NDArray):
        raise TypeError('%s must be an mxnet.nd.NDArray, not %s' % (what, type(tensor).__name__))
    name = np.dtype(tensor.dtype).name
    if name not in _DTYPES:
        raise ValueError('hvd.mxnet: %s has dtype %s; supported: %s' % (what, name, ', '.join(sorted(_DTYPES))))
    return tensor


def _check_priority(priority):
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError('priority must be an int, not %r' % (priority,))


def _op(average, op):
    """MXNet's API takes average=True (Average) or False (Sum); op, when
    given, wins."""
    if op is not None:
        return op
    return Average if (average is None or average) else Sum


def _cpu(tensor):
    return tensor.context.device_type == 'cpu'


def _view(tensor, writable=False):
    """A numpy array over a CPU NDArray's memory, once MXNet's pending
    writes (and, when writable, reads) of it are done; a copy for other
    contexts."""
    if not _cpu(tensor):
        return tensor.asnumpy()
    if writable:
        # MXNet's engine may still read or write it asynchronously: wait for both
        mx.base.check_call(mx.base._LIB.MXNDArrayWaitToWrite(tensor.handle))
    else:
        tensor.wait_to_read()
    if tensor.size == 0:
        return np.empty(tensor.shape, dtype=np.dtype(tensor.dtype))
    ptr = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(tensor.handle, ctypes.byref(ptr)))
    return _dlpack.view(ptr.value, tensor.shape, np.dtype(tensor.dtype), tensor, writable)


def _nd(array, like):
    """array as an NDArray on like's context: through DLPack (no copy) on
    the CPU, else copied."""
    if _cpu(like) and array.size and np.dtype(like.dtype) == array.dtype:
        cap = _dlpack.capsule(array)
        if cap is not None:
            return mx.nd.from_dlpack(cap)
    return mx.nd.array(array, ctx=like.context, dtype=like.dtype)


def _write(dst, array):
    dst[:] = _nd(array, dst)
    return dst


def _widened(op, arrs, process_set):
    """Whether a Sum or Average of arrs is reduced in float32: float16
    tensors over more than 2 ranks are. Summed in float16, each addition
    rounds: x + x + x is fp16(3x), its average an ulp off x for 14 % of
    uniform values in [-100, 100), and a postscale applied to it rounds
    twice, where Horovod's MXNet tests compare with the exact sum (MXNet
    multiplies float16 in float32) at zero tolerance. Summed in float32 and
    rounded once, the results are those. The float16 tensors are copied to
    float32 and back, and twice their bytes travel. (hvd.tensorflow keeps
    Horovod's float16 arithmetic: its tests compare with that.)"""
    if op not in (Average, Sum) or not any(a.dtype == np.float16 for a in arrs):
        return False
    n = process_set.size()  # None for a removed set: the engine reports that
    return n is not None and n > 2


def _wide(arrs, prescale_factor):
    """The float16 arrays in float32 (the others as they are) and the
    prescale left for the engine. When every array is float16 the prescale
    is applied here first, as the engine applies it to float16 (float32
    math rounded to float16), so that only the sum is wider; in a group
    mixing dtypes the engine applies it to all, in float32 for these."""
    if prescale_factor != 1.0 and all(a.dtype == np.float16 for a in arrs):
        f = np.float32(prescale_factor)
        return [(a.astype(np.float32) * f).astype(np.float16).astype(np.float32) for a in arrs], 1.0
    return [a.astype(np.float32) if a.dtype == np.float16 else a for a in arrs], prescale_factor


def _narrow(outs, like):
    return [o.astype(np.float16) if a.dtype == np.float16 else o for o, a in zip(outs, like)]


# ---------------------------------------------------------------- allreduce

@_enqueue_errors
def allreduce(tensor, average=True, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, op=None):
    """Averages (average=True) or sums the tensor over the process set;
    returns a new NDArray (the input is not modified)."""
    _check_priority(priority)
    arr, op = _view(_check(tensor)), _op(average, op)
    wide = _widened(op, [arr], process_set)
    if wide:
        (arr_in,), prescale_factor = _wide([arr], prescale_factor)
    out = _np_ops.allreduce(arr_in if wide else arr, name=name, op=op,
                            prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                            process_set=process_set)
    return _nd(_narrow([out], [arr])[0] if wide else out, tensor)


@_enqueue_errors
def allreduce_(tensor, average=True, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """In-place allreduce: the result is written into tensor, which is returned."""
    _check_priority(priority)
    if _widened(_op(average, op), [_check(tensor)], process_set):
        return _write(tensor, allreduce(tensor, average, name, priority, prescale_factor, postscale_factor,
                                        process_set, op).asnumpy())
    if not _cpu(_check(tensor)):
        out = _np_ops.allreduce(tensor.asnumpy(), name=name, op=_op(average, op), prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor, process_set=process_set)
        return _write(tensor, out)
    _np_ops.allreduce_(_view(tensor, writable=True), name=name, op=_op(average, op),
                       prescale_factor=prescale_factor, postscale_factor=postscale_factor, process_set=process_set)
    return tensor


@_enqueue_errors
def grouped_allreduce(tensors, average=True, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, op=None):
    """Allreduces a list of tensors as one group (negotiated together, fused
    when they fit); returns a list of new NDArrays."""
    _check_priority(priority)
    if not tensors:
        return tensors
    arrs = [_view(_check(t, 'tensors[%d]' % i)) for i, t in enumerate(tensors)]
    op = _op(average, op)
    wide = _widened(op, arrs, process_set)
    if wide:
        ins, prescale_factor = _wide(arrs, prescale_factor)
    outs = _np_ops.grouped_allreduce(ins if wide else arrs, name=name, op=op,
                                     prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                     process_set=process_set)
    return [_nd(o, t) for o, t in zip(_narrow(outs, arrs) if wide else outs, tensors)]


@_enqueue_errors
def grouped_allreduce_(tensors, average=True, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, op=None):
    """In-place grouped allreduce; returns the tensors."""
    _check_priority(priority)
    if not tensors:
        return tensors
    checked = [_check(t, 'tensors[%d]' % i) for i, t in enumerate(tensors)]
    if not all(_cpu(t) for t in checked) or _widened(_op(average, op), checked, process_set):
        outs = grouped_allreduce(tensors, average, name, priority, prescale_factor, postscale_factor, process_set, op)
        for t, o in zip(tensors, outs):
            t[:] = o
        return tensors
    _np_ops.grouped_allreduce_([_view(t, writable=True) for t in checked], name=name, op=_op(average, op),
                               prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                               process_set=process_set)
    return tensors


# ---------------------------------------------------------------- allgather

@_enqueue_errors
def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates the tensor of every member along dimension 0 (which may
    differ per rank); returns a new NDArray."""
    _check_priority(priority)
    return _nd(_np_ops.allgather(_view(_check(tensor)), name=name, process_set=process_set), tensor)


@_enqueue_errors
def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """Allgathers a list of tensors as one group; returns a list."""
    _check_priority(priority)
    if not tensors:
        return tensors
    arrs = [_view(_check(t, 'tensors[%d]' % i)) for i, t in enumerate(tensors)]
    return [_nd(o, t) for o, t in zip(_np_ops.grouped_allgather(arrs, name=name, process_set=process_set), tensors)]


# ---------------------------------------------------------------- broadcast

@_enqueue_errors
def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Returns root_rank's tensor on every member (root_rank is a global
    rank, a member of the set); the input is not modified."""
    _check_priority(priority)
    return _nd(_np_ops.broadcast(_view(_check(tensor)), root_rank, name=name, process_set=process_set), tensor)


@_enqueue_errors
def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place broadcast; returns tensor."""
    _check_priority(priority)
    if not _cpu(_check(tensor)):
        return _write(tensor, _np_ops.broadcast(tensor.asnumpy(), root_rank, name=name, process_set=process_set))
    _np_ops.broadcast_(_view(tensor, writable=True), root_rank, name=name, process_set=process_set)
    return tensor


# ----------------------------------------------------------------- alltoall

@_enqueue_errors
def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends splits[i] rows (dimension 0) to the i-th member of the set;
    without splits dimension 0 is divided evenly. Returns the output, or
    (output, received_splits) when splits is given (received_splits an
    int32 NDArray on the CPU)."""
    _check_priority(priority)
    if isinstance(splits, mx.nd.NDArray):
        splits = splits.asnumpy()
    out, received = _np_ops.synchronize(
        _np_ops.alltoall_async(_view(_check(tensor)), splits=splits, name=name, process_set=process_set))
    output = _nd(out, tensor)
    if splits is None:
        return output
    return output, mx.nd.array(received, ctx=mx.cpu(), dtype='int32')


# ------------------------------------------------------------ reducescatter

@_enqueue_errors
def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces the tensor over the set (Sum or Average) and returns this
    rank's rows: rank r of n gets d0//n + 1 rows if r < d0 % n, else d0//n."""
    _check_priority(priority)
    arr = _view(_check(tensor))
    wide = _widened(op, [arr], process_set)
    if wide:
        (arr_in,), prescale_factor = _wide([arr], prescale_factor)
    out = _np_ops.reducescatter(arr_in if wide else arr, name=name, op=op, process_set=process_set,
                                prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return _nd(_narrow([out], [arr])[0] if wide else out, tensor)


@_enqueue_errors
def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters a list of tensors as one group (each as reducescatter
    does); returns a list of new NDArrays."""
    _check_priority(priority)
    if not tensors:
        return tensors
    arrs = [_view(_check(t, 'tensors[%d]' % i)) for i, t in enumerate(tensors)]
    wide = _widened(op, arrs, process_set)
    if wide:
        ins, prescale_factor = _wide(arrs, prescale_factor)
    outs = _np_ops.grouped_reducescatter(ins if wide else arrs, name=name, op=op, process_set=process_set,
                                         prescale_factor=prescale_factor, postscale_factor=postscale_factor)
    return [_nd(o, t) for o, t in zip(_narrow(outs, arrs) if wide else outs, tensors)]


# ----------------------------------------------------------- point-to-point

def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Posts a send of the NDArray (a copy of its values now) to global rank
    dst (a member of the set, not this rank) and returns a handle at once;
    synchronize(handle) waits until it is delivered and returns the NDArray."""
    handle = _np_ops.isend(_check(tensor).asnumpy(), dst, tag=tag, process_set=process_set)
    return _convert_result(handle, tensor, lambda _: tensor)


def _recv_buffer(tensor):
    _check(tensor)
    return np.empty(tensor.shape, dtype=np.dtype(tensor.dtype))


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Posts a receive into the NDArray from global rank src and returns a
    handle at once; synchronize(handle) waits, writes the received values
    into the NDArray and returns it."""
    buf = _recv_buffer(tensor)
    handle = _np_ops.irecv(buf, src, tag=tag, process_set=process_set)
    return _convert_result(handle, tensor, lambda filled: _write(tensor, filled))


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends the NDArray to global rank dst; blocks until it is delivered (a
    large send may wait for the matching recv: post receives first, or use
    isend). Returns None."""
    _np_ops.send(_view(_check(tensor)), dst, tag=tag, process_set=process_set)


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into the NDArray from global rank src, blocking; returns it."""
    buf = _recv_buffer(tensor)
    return _write(tensor, _np_ops.recv(buf, src, tag=tag, process_set=process_set))


# ------------------------------------------------------------- optimizers

class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an mx.optimizer.Optimizer: each gradient is summed over the
    process set before the update, and rescale_grad is divided by the set's
    size (averaging, as Horovod does)."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0, process_set=global_process_set):
        self._optimizer = optimizer
        self._optimizer.rescale_grad *= (gradient_predivide_factor / process_set.size())
        self._gradient_predivide_factor = gradient_predivide_factor
        self._num_groups = num_groups
        self._process_set = process_set

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _do_allreduce(self, index, grad):
        # A rank outside the process set updates with its own gradient.
        if self._process_set.size() == 1 or not self._process_set.included():
            return
        prescale = 1.0 / self._gradient_predivide_factor
        if isinstance(index, (tuple, list)):
            if self._num_groups > 0:
                per = -(-len(index) // self._num_groups)
                for start in range(0, len(index), per):
                    grouped_allreduce_(grad[start:start + per], average=False,
                                       name='%s:%s' % (index[start], index[min(start + per, len(index)) - 1]),
                                       priority=-start, prescale_factor=prescale, process_set=self._process_set)
            else:
                for i in range(len(index)):
                    allreduce_(grad[i], average=False, name=str(index[i]), priority=-i, prescale_factor=prescale,
                               process_set=self._process_set)
        else:
            allreduce_(grad, average=False, name=str(index), prescale_factor=prescale, process_set=self._process_set)

    def update(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class FP16Compressor:
    """Casts floating NDArrays to float16 for the reduction and back after."""

    @staticmethod
    def compress(tensor):
        dt = np.dtype(tensor.dtype)
        if dt.kind == 'f' and dt != np.float16:
            return tensor.astype('float16'), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class Compression:
    """Horovod's Compression choices: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor


class DistributedTrainer(mx.gluon.Trainer):
    """A gluon Trainer whose gradients are summed over the process set
    before each step (with the 1/size of averaging folded into the
    trainer's scale, as Horovod does). Pass params and an optimizer, not a
    DistributedOptimizer."""

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0, process_set=global_process_set):
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn('DistributedTrainer does not take DistributedOptimizer as its optimizer. '
                          'We have unwrapped it for you.')
        super(DistributedTrainer, self).__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._scale *= (gradient_predivide_factor / process_set.size())
        self._gradient_predivide_factor = gradient_predivide_factor
        self._compression = compression
        self._prefix = prefix if prefix else ''
        self._num_groups = num_groups
        self._process_set = process_set

    def _allreduce_grads(self):
        if self._process_set.size() == 1:
            return
        prescale = 1.0 / self._gradient_predivide_factor
        for i, param in enumerate(self._params):
            if param.grad_req == 'null':
                continue
            grad = param.list_grad()[0]
            compressed, ctx = self._compression.compress(grad)
            allreduce_(compressed, average=False, name=self._prefix + str(i), priority=-i,
                       prescale_factor=prescale, process_set=self._process_set)
            if ctx is not None:
                grad[:] = self._compression.decompress(compressed, ctx)


def broadcast_parameters(params, root_rank=0, prefix=None, process_set=global_process_set):
    """Broadcasts the parameters from root_rank to every member of the set,
    in place: a dict of name -> NDArray, or gluon's ParameterDict
    (net.collect_params()); names are sorted so every rank matches them."""
    if prefix is None:
        prefix = ''
    if isinstance(params, dict):
        items = sorted(params.items())
    elif hasattr(params, 'items'):
        items = sorted(params.items())
    else:
        raise ValueError('invalid params of type: %s' % type(params))
    for name, p in items:
        if isinstance(p, mx.nd.NDArray):
            tensors = [p]
        elif hasattr(p, 'list_data'):
            try:
                tensors = p.list_data()
            except mx.gluon.parameter.DeferredInitializationError:
                # Its shape is known at the first forward pass: broadcast it
                # then, right after MXNet initializes it (as Horovod does).
                _broadcast_when_initialized(p, root_rank, prefix + str(name), process_set)
                continue
            except Exception as e:  # not initialized at all
                raise ValueError('hvd.mxnet: parameter %s has no data (%s); initialize it before '
                                 'broadcast_parameters' % (name, e))
        else:
            raise ValueError('invalid parameter %s of type %s' % (name, type(p)))
        for t in tensors:
            broadcast_(t, root_rank, name=prefix + str(name), process_set=process_set)


def _broadcast_when_initialized(param, root_rank, name, process_set):
    """Makes a Parameter whose initialization is deferred broadcast its data
    from root_rank as soon as MXNet initializes it (its first forward pass;
    every rank runs that pass, so the broadcasts match)."""
    init_impl = param._init_impl

    def _init_impl(self, *args, **kwargs):
        init_impl(*args, **kwargs)
        del self._init_impl  # once: later re-initializations are the user's
        for t in self.list_data():
            broadcast_(t, root_rank, name=name, process_set=process_set)

    param._init_impl = types.MethodType(_init_impl, param)
