"""hvd.numpy: Horovod's collectives on numpy arrays (``import hvd.numpy as hvd``).

The same engine, process sets and error model as hvd.torch, on
``numpy.ndarray``: it is the runtime path of the TensorFlow and MXNet
adapters (which hand their tensors over as numpy arrays) and useful on its
own. Argument names and semantics are Horovod's:

- ``allreduce(tensor, average=None, name=None, compression=Compression.none,
  op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=...)``
  returns a new array; ``allreduce_`` writes the result into ``tensor``;
  ``*_async`` return a handle for ``poll``/``synchronize``; ``grouped_*``
  take a list (negotiated as one group, fused when they fit).
- ``allgather`` concatenates along dimension 0 (which may differ per rank);
  ``broadcast``/``broadcast_`` take a *global* root rank; ``alltoall``
  returns the output, or ``(output, received_splits)`` when ``splits`` is
  given; ``reducescatter`` gives rank r of n ``d0//n + 1`` rows when
  ``r < d0 % n``, else ``d0//n`` (Sum or Average).
- Point-to-point, as hvd.torch's (see its p2p module): ``isend(tensor, dst,
  tag=0, process_set=...)`` and ``irecv(tensor, src, ...)`` return handles
  (irecv fills ``tensor``, a writable ndarray, in place; ``synchronize``
  returns it), ``send`` and ``recv`` block. ``dst``/``src`` are global ranks,
  members of the set, not this rank; tags are 0 .. 2**32-1 and must match
  the sender's (checked, not searched for); messages between two ranks on
  one set arrive in the order sent. A size or tag mismatch raises
  HorovodInternalError and breaks that set's point-to-point connections.
- Bad arguments, a process set this rank is not in, an unknown set: ValueError
  at call time. Ranks that disagree on shape, dtype, op or root, a dead peer,
  shutdown: HorovodInternalError from ``synchronize`` (on every rank).

Memory: an aligned C-contiguous array is handed to the engine by address,
without a copy: the engine reads inputs from it, writes allreduce outputs
into an array allocated here and in-place results (``allreduce_``,
``broadcast_``, ``irecv``/``recv``) into the array itself; sends are read
from the array itself. Other arrays (non-contiguous views,
unaligned buffers) are copied into a contiguous one first and, for in-place
ops, the result is copied back. Allgather, alltoall and reducescatter
outputs, whose shapes only negotiation knows, are copied once out of the
engine. Every array an op uses stays referenced until ``synchronize``
returns; do not modify an input before then. Waiting releases the GIL.

Element types: uint8, int8, uint16, int16, int32, int64, float16, float32,
float64, bool, and bfloat16 when the array's dtype is named ``bfloat16``
(ml_dtypes). Native byte order only.
"""
import numbers
import pickle

import numpy as np

from hvd.common import _abi, loader as _loader

_loader.load()

from hvd.common.basics import (init, shutdown, is_initialized, start_timeline, stop_timeline, size,  # noqa: E402
                               local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
                               mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
                               nccl_built, ddl_built, ccl_built, cuda_built, rocm_built)
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: E402,F401
from hvd.common.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: E402,F401
                                     remove_process_set, _set_id)

# Reduction ops, with Horovod's values.
from hvd.common.ops import (Average, Sum, Adasum, Min, Max, Product,  # noqa: E402,F401
                            handle_average_backwards_compatibility, check_adasum, op_name)

_DTYPES = {
    np.dtype(np.uint8): _abi.DTYPE_UINT8,
    np.dtype(np.int8): _abi.DTYPE_INT8,
    np.dtype(np.uint16): _abi.DTYPE_UINT16,
    np.dtype(np.int16): _abi.DTYPE_INT16,
    np.dtype(np.int32): _abi.DTYPE_INT32,
    np.dtype(np.int64): _abi.DTYPE_INT64,
    np.dtype(np.float16): _abi.DTYPE_FLOAT16,
    np.dtype(np.float32): _abi.DTYPE_FLOAT32,
    np.dtype(np.float64): _abi.DTYPE_FLOAT64,
    np.dtype(np.bool_): _abi.DTYPE_BOOL,
}



class Compressor:
    """Compresses an array before an allreduce and restores it after."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """No compression."""


class FP16Compressor(Compressor):
    """Casts floating arrays to float16 for the reduction and back after."""

    @staticmethod
    def compress(tensor):
        tensor = np.asarray(tensor)
        if tensor.dtype.kind == 'f' and tensor.dtype != np.float16:
            return tensor.astype(np.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class Compression:
    """Horovod's Compression choices: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor


def _dtype_code(dtype, what):
    code = _DTYPES.get(dtype)
    if code is not None:
        return code
    if dtype.name == 'bfloat16':
        return _abi.DTYPE_BFLOAT16
    if dtype.byteorder not in ('=', '|') and dtype.newbyteorder('=') in _DTYPES:
        raise ValueError('hvd: %s has non-native byte order (%s); convert it with '
                         'a.astype(a.dtype.newbyteorder("="))' % (what, dtype.str))
    raise ValueError('Tensor type %s is not supported (%s).' % (dtype, what))


def _as_array(tensor, what='tensor'):
    """An ndarray for an input: arrays as they are, array-likes converted."""
    if isinstance(tensor, np.ndarray):
        arr = tensor
    else:
        if tensor is None or isinstance(tensor, (str, bytes, dict)):
            raise TypeError('%s must be a numpy array (or array-like), not %s' % (what, type(tensor).__name__))
        arr = np.asarray(tensor)
        if arr.dtype == object:
            raise TypeError('%s is not a numeric array-like: %r' % (what, tensor))
    _dtype_code(arr.dtype, what)
    return arr


def _check_inplace(tensor, what='tensor'):
    if not isinstance(tensor, np.ndarray):
        raise TypeError('%s must be a numpy array for an in-place op, not %s' % (what, type(tensor).__name__))
    if not tensor.flags.writeable:
        raise ValueError('hvd: %s is read-only; an in-place op writes its result into it' % what)
    _dtype_code(tensor.dtype, what)
    return tensor


def _contig(arr):
    """arr itself when the engine can use its memory, else a contiguous copy."""
    if arr.flags.c_contiguous and arr.flags.aligned:
        return arr
    return np.ascontiguousarray(arr)


def _desc(arr):
    return arr.ctypes.data, _dtype_code(arr.dtype, 'tensor'), list(arr.shape)


from hvd.common.handles import track as _track, _handle_map  # noqa: E402,F401


def _convert_result(handle, keep, convert):
    """Re-registers a handle issued here so that ``synchronize`` returns
    ``convert(result)`` instead of the array, and keeps ``keep`` alive until
    then (the TensorFlow and MXNet modules hand back framework tensors this
    way: handles live in one table, hvd.common.handles). Returns handle."""
    arrays, result = _handle_map[handle]
    return _track(handle, (arrays, keep), lambda: convert(result()))


def _copy_back(dst, src):
    if dst is not src:
        np.copyto(dst, src)
    return dst


def _check_op(op, process_set):
    if isinstance(op, bool) or op not in (Average, Sum, Adasum, Min, Max, Product):
        raise ValueError('unknown reduce op %r: use hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max or hvd.Product' % (op,))
    if op == Adasum:
        check_adasum(_set_id(process_set), size())


def _engine_output(handle, index, dtype):
    shape = _abi.handle_output_shape(handle, index)
    out = np.empty(shape, dtype=dtype)
    _abi.handle_output_copy(handle, index, out.ctypes.data, out.nbytes)
    return out


# ---------------------------------------------------------------- allreduce

def _allreduce_async(tensor, in_place, name, op, prescale_factor, postscale_factor, process_set):
    _check_op(op, process_set)
    arr = _check_inplace(tensor) if in_place else _as_array(tensor)
    src = _contig(arr)
    out = src if in_place else np.empty(src.shape, dtype=src.dtype)
    ptr, dt, shape = _desc(src)
    handle = _abi.allreduce_async(ptr, out.ctypes.data, dt, shape, op, float(prescale_factor),
                                  float(postscale_factor), _set_id(process_set), name)
    if in_place:
        return _track(handle, (arr, src), lambda: _copy_back(arr, src))
    return _track(handle, (arr, src, out), lambda: out)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Asynchronously averages (or reduces with op) the array over the
    process set; synchronize(handle) returns a new array (the input is not
    modified)."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, False, name, op, prescale_factor, postscale_factor, process_set)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Averages (or reduces with op) the array over the process set and
    returns the result as a new array."""
    compressed, ctx = compression.compress(_as_array(tensor))
    out = synchronize(allreduce_async(compressed, average, name, op, prescale_factor, postscale_factor,
                                      process_set))
    return compression.decompress(out, ctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place allreduce_async: the result is written into tensor."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, True, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns tensor."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


# -------------------------------------------------------- grouped allreduce

def _check_group(tensors, in_place=False):
    if not isinstance(tensors, (list, tuple)) or len(tensors) == 0:
        raise ValueError('expected a non-empty list of arrays')
    if in_place:
        return [_check_inplace(t, 'tensors[%d]' % i) for i, t in enumerate(tensors)]
    return [_as_array(t, 'tensors[%d]' % i) for i, t in enumerate(tensors)]


def _group_desc(arrs):
    ptrs, dtypes, ndims, shapes = [], [], [], []
    for a in arrs:
        ptrs.append(a.ctypes.data)
        dtypes.append(_dtype_code(a.dtype, 'tensor'))
        ndims.append(a.ndim)
        shapes.extend(a.shape)
    return ptrs, dtypes, ndims, shapes


def _grouped_allreduce_async(tensors, in_place, name, op, prescale_factor, postscale_factor, process_set):
    _check_op(op, process_set)
    arrs = _check_group(tensors, in_place)
    srcs = [_contig(a) for a in arrs]
    outs = srcs if in_place else [np.empty(s.shape, dtype=s.dtype) for s in srcs]
    ptrs, dtypes, ndims, shapes = _group_desc(srcs)
    handle = _abi.grouped_allreduce_async(ptrs, [o.ctypes.data for o in outs], dtypes, ndims, shapes, op,
                                          float(prescale_factor), float(postscale_factor), _set_id(process_set),
                                          name)
    if in_place:
        return _track(handle, (arrs, srcs), lambda: [_copy_back(a, s) for a, s in zip(arrs, srcs)])
    return _track(handle, (arrs, srcs, outs), lambda: list(outs))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Asynchronously allreduces a list of arrays as one group; synchronize
    returns a list of new arrays."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, False, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of arrays as one group; returns a list of new arrays."""
    arrs = _check_group(tensors)
    pairs = [compression.compress(a) for a in arrs]
    outs = synchronize(grouped_allreduce_async([p[0] for p in pairs], average, name, op, prescale_factor,
                                               postscale_factor, process_set))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place grouped_allreduce_async."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, True, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the arrays."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# ---------------------------------------------------------------- allgather

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronously concatenates the array of every member of the set
    along dimension 0 (which may differ per rank)."""
    arr = _as_array(tensor)
    src = _contig(arr)
    ptr, dt, shape = _desc(src)
    handle = _abi.allgather_async(ptr, dt, shape, _set_id(process_set), name)
    return _track(handle, (arr, src), lambda: _engine_output(handle, 0, arr.dtype))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates the array of every member along dimension 0; returns a
    new array."""
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronously allgathers a list of arrays as one group."""
    arrs = _check_group(tensors)
    srcs = [_contig(a) for a in arrs]
    ptrs, dtypes, ndims, shapes = _group_desc(srcs)
    handle = _abi.grouped_allgather_async(ptrs, dtypes, ndims, shapes, _set_id(process_set), name)
    return _track(handle, (arrs, srcs), lambda: [_engine_output(handle, i, a.dtype) for i, a in enumerate(arrs)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of arrays as one group; returns a list."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---------------------------------------------------------------- broadcast

def _broadcast_async(tensor, root_rank, name, process_set, in_place):
    if isinstance(root_rank, bool) or not isinstance(root_rank, numbers.Integral):
        raise ValueError('root_rank must be an integer (a global rank), not %r' % (root_rank,))
    if in_place:
        arr = _check_inplace(tensor)
        buf = _contig(arr)
    else:
        arr = _as_array(tensor)
        buf = np.array(arr, order='C', copy=True)
    ptr, dt, shape = _desc(buf)
    handle = _abi.broadcast_async(ptr, dt, shape, int(root_rank), _set_id(process_set), name)
    if in_place:
        return _track(handle, (arr, buf), lambda: _copy_back(arr, buf))
    return _track(handle, (arr, buf), lambda: buf)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronously broadcasts root_rank's array (root_rank is a global
    rank, a member of the set); the result is a new array."""
    return _broadcast_async(tensor, root_rank, name, process_set, False)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's array on every member of the set."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast_async."""
    return _broadcast_async(tensor, root_rank, name, process_set, True)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns tensor."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ----------------------------------------------------------------- alltoall

def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, np.ndarray):
        if splits.ndim != 1:
            raise ValueError('splits must be a 1-D array, not %d-D' % splits.ndim)
        if splits.dtype.kind not in 'iu':
            raise ValueError('splits must hold integers, not %s' % splits.dtype)
        return [int(s) for s in splits]
    out = []
    for s in splits:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise ValueError('splits must be integers, got %r' % (s,))
        out.append(int(s))
    return out


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronously sends splits[i] rows of the array (dimension 0, in
    order) to the i-th member of the set; without splits dimension 0 is
    divided evenly. synchronize returns (output, received_splits), the
    latter an int32 array."""
    arr = _as_array(tensor)
    splits = _splits_list(splits)
    src = _contig(arr)
    ptr, dt, shape = _desc(src)
    handle = _abi.alltoall_async(ptr, dt, shape, splits, _set_id(process_set), name)

    def result():
        return (_engine_output(handle, 0, arr.dtype),
                np.array(_abi.handle_received_splits(handle), dtype=np.int32))

    return _track(handle, (arr, src), result)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Alltoall; returns the output, or (output, received_splits) when
    splits is given."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# ------------------------------------------------------------ reducescatter

def _check_scatter_op(op):
    if op == Adasum:
        raise NotImplementedError('Reducescatter does not support Adasum; use op=hvd.Average or hvd.Sum')
    if isinstance(op, bool) or op not in (Average, Sum):
        raise ValueError('Reducescatter only supports AVERAGE and SUM ops, not %s' % op_name(op))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronously reduces the array over the set and scatters the rows:
    rank r of n gets d0//n + 1 rows if r < d0 % n, else d0//n."""
    _check_scatter_op(op)
    arr = _as_array(tensor)
    src = _contig(arr)
    ptr, dt, shape = _desc(src)
    handle = _abi.reducescatter_async(ptr, dt, shape, op, float(prescale_factor), float(postscale_factor),
                                      _set_id(process_set), name)
    return _track(handle, (arr, src), lambda: _engine_output(handle, 0, arr.dtype))


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter; returns this rank's rows of the reduction."""
    compressed, ctx = compression.compress(_as_array(tensor))
    out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronously reducescatters a list of arrays as one group."""
    _check_scatter_op(op)
    arrs = _check_group(tensors)
    srcs = [_contig(a) for a in arrs]
    ptrs, dtypes, ndims, shapes = _group_desc(srcs)
    handle = _abi.grouped_reducescatter_async(ptrs, dtypes, ndims, shapes, op, float(prescale_factor),
                                              float(postscale_factor), _set_id(process_set), name)
    return _track(handle, (arrs, srcs), lambda: [_engine_output(handle, i, a.dtype) for i, a in enumerate(arrs)])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters a list of arrays as one group; returns a list."""
    arrs = _check_group(tensors)
    pairs = [compression.compress(a) for a in arrs]
    outs = synchronize(grouped_reducescatter_async([p[0] for p in pairs], name, op, process_set, prescale_factor,
                                                   postscale_factor))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ----------------------------------------------------------- point-to-point

def _check_peer(peer, what):
    if isinstance(peer, bool) or not isinstance(peer, numbers.Integral):
        raise ValueError('hvd: %s must be a global rank (int), not %r' % (what, peer))
    return int(peer)


def _check_tag(tag):
    if isinstance(tag, bool) or not isinstance(tag, numbers.Integral) or not 0 <= tag < 1 << 32:
        raise ValueError('hvd: tag must be an int in 0 .. 2**32-1, not %r' % (tag,))
    return int(tag)


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Posts a send of the array to global rank ``dst`` (a member of
    ``process_set``) and returns a handle at once; ``synchronize(handle)``
    waits until it is delivered and returns the array. The array must not
    be modified before then."""
    arr = _as_array(tensor)
    dst = _check_peer(dst, 'dst')
    tag = _check_tag(tag)
    buf = _contig(arr)
    ptr, dt, shape = _desc(buf)
    handle = _abi.send_async(ptr, dt, shape, dst, tag, _set_id(process_set))
    return _track(handle, (arr, buf), lambda: arr)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Posts a receive into the array (written in place, so a writable
    ndarray) from global rank ``src`` and returns a handle at once;
    ``synchronize(handle)`` waits and returns the array, filled."""
    arr = _check_inplace(tensor)
    src = _check_peer(src, 'src')
    tag = _check_tag(tag)
    buf = _contig(arr)
    ptr, dt, shape = _desc(buf)
    handle = _abi.recv_async(ptr, dt, shape, src, tag, _set_id(process_set))
    return _track(handle, (arr, buf), lambda: _copy_back(arr, buf))


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends the array to global rank ``dst`` and blocks until it is
    delivered (or, for small messages, buffered). Returns None. A large send
    may wait for the matching ``recv``: post receives first, or use isend."""
    arr = _as_array(tensor)
    dst = _check_peer(dst, 'dst')
    tag = _check_tag(tag)
    buf = _contig(arr)
    ptr, dt, shape = _desc(buf)
    _abi.send(ptr, dt, shape, dst, tag, _set_id(process_set))


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into the array (in place) from global rank ``src``, blocking;
    returns the array."""
    arr = _check_inplace(tensor)
    src = _check_peer(src, 'src')
    tag = _check_tag(tag)
    buf = _contig(arr)
    ptr, dt, shape = _desc(buf)
    _abi.recv(ptr, dt, shape, src, tag, _set_id(process_set))
    return _copy_back(arr, buf)


# ------------------------------------------------ handles, join and barrier

from hvd.common.handles import poll, synchronize, join, barrier  # noqa: E402,F401



# ---------------------------------------------------------- object helpers

def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank and returns it on every member of the set
    (two broadcasts: <name>.sz and <name>.t)."""
    if name is None:
        name = type(obj).__name__
    if rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()
        sz = np.array([payload.size], dtype=np.int64)
        broadcast_(sz, root_rank, name + '.sz', process_set)
    else:
        sz = np.zeros(1, dtype=np.int64)
        broadcast_(sz, root_rank, name + '.sz', process_set)
        payload = np.empty(int(sz[0]), dtype=np.uint8)
    broadcast_(payload, root_rank, name + '.t', process_set)
    if rank() != root_rank:
        obj = pickle.loads(payload.tobytes())
    return obj


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickles obj and returns the list of every member's object, in set-rank
    order (two allgathers: <name>.sz and <name>.t)."""
    if name is None:
        name = type(obj).__name__
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(np.array([payload.size], dtype=np.int64), name=name + '.sz', process_set=process_set)
    gathered = allgather(payload, name=name + '.t', process_set=process_set)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [pickle.loads(gathered[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(sizes))]



from hvd.numpy import mpi_ops  # noqa: E402,F401  (hvd.mpi_ops._basics, as in Horovod's modules)
