"""hvd.tensorflow.collectives: the collectives of hvd.tensorflow on
tf.Tensor (zero copy on the CPU, tf.py_function in graphs, their
gradients), point-to-point, and the gradient reduction the wrappers
(DistributedGradientTape, DistributedOptimizer, hvd.tensorflow.keras) share.
hvd.tensorflow re-exports its public names; see its docstring."""
import sys as _sys

import numpy as _numpy
import tensorflow as tf

import hvd.numpy as _np_ops
import hvd.tensorflow._plugin as _plugin
from hvd.common import compression as _compression
from hvd.common import dlpack as _dlpack
from hvd.common.exceptions import CODES as _CODES, HorovodInternalError
from hvd.common.collectives import Collectives as _Collectives
from hvd.common.handles import convert_result as _convert_result
from hvd.numpy.arrays import NumpyArrays as _NumpyArrays
from hvd.numpy.compression import Compression as _NumpyCompression
from hvd.numpy import rank, global_process_set, Average, Sum

# The dtypes the plugin describes; anything else is refused with a clear error.
_DTYPES = frozenset(tf.as_dtype(n) for n in _plugin.DTYPES)


class Compressor(_compression.NoneCompressor):
    """Compresses a tensor before an allreduce and restores it after (this
    base passes it through)."""


class NoneCompressor(Compressor):
    """No compression."""


class FP16Compressor(Compressor):
    """Casts floating tensors to float16 for the reduction and back after."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Horovod's Compression choices: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor


class MismatchError(HorovodInternalError, tf.errors.FailedPreconditionError):
    """Ranks called a collective with different shapes, dtypes or root
    ranks. Horovod's TensorFlow ops raise tf.errors.FailedPreconditionError
    for it; this is that and hvd's HorovodInternalError both, so an except
    clause for either catches it."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)
        self.args = (message,)
        self.hvd_code = _CODES['MISMATCH']


class InvalidArgumentError(ValueError, tf.errors.InvalidArgumentError):
    """A collective's arguments are wrong on this rank (found before it
    runs): Horovod's TensorFlow ops raise tf.errors.InvalidArgumentError;
    this is that and the ValueError hvd raises elsewhere."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)
        self.args = (message,)


def _is_mismatch(e):
    return isinstance(e, HorovodInternalError) and getattr(e, 'hvd_code', None) == _CODES['MISMATCH']


def _tf_error(e):
    """The error Horovod's TensorFlow op would raise for hvd's e (e itself
    when there is none)."""
    if isinstance(e, tf.errors.OpError):
        return e
    if _is_mismatch(e):
        return MismatchError(str(e))
    if type(e) is ValueError:  # hvd's call-time argument errors
        return InvalidArgumentError(str(e))
    return e


# A graph cannot raise a typed error from a tf.py_function (TensorFlow turns
# every Python exception but a few built-in ones into UnknownError). A graph
# collective that finds ranks disagreeing prints the message and returns a
# status instead, and a tf.cond on it raises tf.errors.FailedPreconditionError,
# as Horovod's op does: reading a variable that does not exist is an error of
# that type. The status is an int32 tensor made once (a string output would
# cost ~150 us a call; this costs ~25 us).
_MISMATCH_VARIABLE = 'hvd_ranks_disagree_on_a_collective_see_the_message_printed_above'
_status = {}


def _status_tensor(code):
    if code not in _status:
        _status[code] = tf.constant(code, tf.int32)
    return _status[code]


def _raise_mismatch():
    handle = tf.raw_ops.VarHandleOp(dtype=tf.int32, shape=[], shared_name=_MISMATCH_VARIABLE)
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int32)


def _tensor(x, what='tensor'):
    t = tf.convert_to_tensor(x)
    if t.dtype not in _DTYPES:
        raise ValueError('hvd.tensorflow: %s has dtype %s; supported: %s'
                         % (what, t.dtype.name, ', '.join(sorted(d.name for d in _DTYPES))))
    return t


class _AlignedArrays(_NumpyArrays):
    """hvd.numpy's arrays, with the outputs the engine writes allocated at
    64-byte boundaries: TensorFlow takes them through DLPack without a copy
    (it aborts on a tensor less aligned)."""

    def empty_like(self, x):
        return _dlpack.aligned_empty(x.shape, x.dtype)

    def empty(self, shape, like):
        return _dlpack.aligned_empty(shape, like.dtype)

    def clone(self, x):
        out = _dlpack.aligned_empty(x.shape, x.dtype)
        _numpy.copyto(out, x)
        return out


class _Ops:
    """The collectives on numpy arrays (hvd.numpy's signatures) whose
    outputs become tf.Tensors: the same engine calls as hvd.numpy, bound to
    _AlignedArrays."""

    def __init__(self):
        self.c = _Collectives(_AlignedArrays())

    def allreduce(self, tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
        return self.c.allreduce(tensor, None, name, _NumpyCompression.none, op, prescale_factor,
                                postscale_factor, process_set)

    def allreduce_async(self, tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set):
        return self.c.allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor, process_set)

    def grouped_allreduce(self, tensors, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
        return self.c.grouped_allreduce(tensors, None, name, _NumpyCompression.none, op, prescale_factor,
                                        postscale_factor, process_set)

    def grouped_allreduce_async(self, tensors, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                                process_set=global_process_set):
        return self.c.grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor,
                                              process_set)

    def allgather(self, tensor, name=None, process_set=global_process_set):
        return self.c.allgather(tensor, name, process_set)

    def grouped_allgather(self, tensors, name=None, process_set=global_process_set):
        return self.c.grouped_allgather(tensors, name, process_set)

    def broadcast(self, tensor, root_rank, name=None, process_set=global_process_set):
        return self.c.broadcast(tensor, root_rank, name, process_set)

    def broadcast_async(self, tensor, root_rank, name=None, process_set=global_process_set):
        return self.c.broadcast_async(tensor, root_rank, name, process_set)

    def alltoall_async(self, tensor, splits=None, name=None, process_set=global_process_set):
        return self.c.alltoall_async(tensor, splits, name, process_set)

    def reducescatter(self, tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                      postscale_factor=1.0):
        return self.c.reducescatter(tensor, name, _NumpyCompression.none, op, process_set, prescale_factor,
                                    postscale_factor)

    def grouped_reducescatter(self, tensors, name=None, op=Average, process_set=global_process_set,
                              prescale_factor=1.0, postscale_factor=1.0):
        return self.c.grouped_reducescatter(tensors, name, _NumpyCompression.none, op, process_set,
                                            prescale_factor, postscale_factor)


_ops = _Ops()


def as_numpy(t):
    """A numpy array over an eager tensor's memory: a read-only view of a
    CPU tensor (no copy), a copy otherwise (GPU tensors, dtypes the buffer
    protocol does not carry)."""
    if t.dtype != tf.bool and 'GPU' not in t.device:
        try:
            return _numpy.asarray(memoryview(t))
        except (TypeError, ValueError, BufferError):
            pass
    return t.numpy()


def to_tf(arr, dtype):
    """A tf.Tensor of dtype holding the array: through DLPack, no copy,
    when the array allows it; else converted (a copy)."""
    if (isinstance(arr, _numpy.ndarray) and arr.dtype != _numpy.bool_ and arr.size
            and _dlpack.is_aligned(arr)):
        cap = _dlpack.capsule(arr)
        if cap is not None:
            t = tf.experimental.dlpack.from_dlpack(cap)
            if t.dtype == dtype:
                return t
    return tf.convert_to_tensor(arr, dtype=dtype)


def _run(fn, inputs, touts):
    """Runs fn on the inputs as numpy arrays and returns tf tensors: at once
    in eager mode, as a tf.py_function inside a graph. fn returns one array
    or a list of arrays (matching touts when touts is a list). Errors are
    Horovod's TensorFlow ones (see _tf_error)."""
    multi = isinstance(touts, (list, tuple))
    tlist = list(touts) if multi else [touts]

    def compute(*ts):
        out = fn(*[as_numpy(t) for t in ts])
        return [to_tf(o, d) for o, d in zip(out if multi else [out], tlist)]

    if tf.executing_eagerly():
        try:
            res = compute(*inputs)
        except Exception as e:  # noqa: BLE001 (re-raised, typed as Horovod's)
            typed = _tf_error(e)
            if typed is e:
                raise
            raise typed from e
        return res if multi else res[0]

    def call(*ts):
        try:
            return compute(*ts) + [_status_tensor(0)]
        except HorovodInternalError as e:
            if not _is_mismatch(e):
                raise
            print('hvd: %s' % e, file=_sys.stderr, flush=True)
            return [tf.zeros([0], d) for d in tlist] + [_status_tensor(1)]

    # Inside a graph the executor may run independent ops in any order, and
    # a tf.py_function blocks its thread until the collective completes: two
    # ranks running two collectives in different orders would wait on each
    # other. Chaining every collective of a graph after the previous one
    # (control dependencies, in trace order, which is the same on every
    # rank) makes them run in one order everywhere. Horovod's ops are
    # asynchronous kernels and need no such chain.
    graph = tf.compat.v1.get_default_graph()
    last = getattr(graph, '_hvd_last_collective', None)
    with tf.control_dependencies([last] if last is not None else []):
        outs = tf.py_function(call, list(inputs), tlist + [tf.int32])
    check = tf.cond(outs[-1] > 0, _raise_mismatch, lambda: tf.constant(0))
    with tf.control_dependencies([check]):
        outs = [tf.identity(o) for o in outs[:-1]]
    graph._hvd_last_collective = outs[0].op
    return outs if multi else outs[0]


try:  # TensorFlow >= 2.12
    from tensorflow.python.eager.record import could_possibly_record as _could_possibly_record
except ImportError:  # pragma: no cover (older TensorFlow)
    try:
        from tensorflow.python.eager.tape import could_possibly_record as _could_possibly_record
    except ImportError:
        def _could_possibly_record():
            return True


def _needs_gradient():
    """Whether an op may have to give a gradient: always inside a graph
    (traced once), in eager mode only while a GradientTape records.
    tf.custom_gradient costs a few hundred microseconds per eager call,
    more than a small allreduce itself."""
    return not tf.executing_eagerly() or _could_possibly_record()


def _graph_name(kind, tensor, name):
    """Inside a graph, an unnamed op is named after its tensor, as Horovod
    names its graph ops (HorovodAllreduce_<tensor name>): the graph may run
    independent collectives in any order, and the engine matches them
    across ranks by name. Eagerly, unnamed ops are matched in call order."""
    if name is not None or tf.executing_eagerly():
        return name
    return 'Horovod%s_%s' % (kind, tensor.name.replace(':', '_').replace('/', '_'))


def _grad_name(name, suffix):
    return None if name is None else '%s.%s' % (name, suffix)


# ---------------------------------------------------------------- allreduce

def _allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set):
    name = _graph_name('Allreduce', tensor, name)
    if not _needs_gradient():
        return _run(lambda a: _ops.allreduce(a, name=name, op=op, prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor, process_set=process_set),
                    [tensor], tensor.dtype)

    @tf.custom_gradient
    def fn(x):
        y = _run(lambda a: _ops.allreduce(a, name=name, op=op, prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor, process_set=process_set),
                 [x], x.dtype)
        y.set_shape(x.shape)

        def grad(dy):
            return _allreduce(dy, _grad_name(name, 'grad'), op, prescale_factor, postscale_factor, process_set)

        return y, grad

    return fn(tensor)


def allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Averages (or reduces with op) the tensor over the process set.

    tf.IndexedSlices are gathered (values and indices), as in Horovod; for
    Average the values are divided by the set's size. device_dense,
    device_sparse and ignore_name_scope are accepted for compatibility.
    """
    op = _np_ops.handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor)
        return _allreduce_sparse(tensor, name, op, process_set)
    t = _tensor(tensor)
    compressed, ctx = compression.compress(t)
    out = _allreduce(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def _check_sparse(op, prescale_factor, postscale_factor):
    if op not in (Average, Sum):
        raise NotImplementedError('Only Sum and Average ops are supported with tf.IndexedSlices')
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError('Pre/postscale_factor are not supported with tf.IndexedSlices')


def _allreduce_sparse(tensor, name, op, process_set):
    """tf.IndexedSlices reduced as Horovod does: values and indices
    gathered, the values divided by the set's size for Average."""
    values = allgather(tensor.values, name=_grad_name(name, 'values'), process_set=process_set)
    indices = allgather(tensor.indices, name=_grad_name(name, 'indices'), process_set=process_set)
    if op == Average:
        values = tf.math.divide(values, tf.cast(process_set.size(), values.dtype))
    return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)


def _grouped_allreduce(tensors, name, op, prescale_factor, postscale_factor, process_set):
    def run(xs):
        outs = _run(lambda *arrs: _ops.grouped_allreduce(list(arrs), name=name, op=op,
                                                            prescale_factor=prescale_factor,
                                                            postscale_factor=postscale_factor,
                                                            process_set=process_set),
                    xs, [x.dtype for x in xs])
        for o, x in zip(outs, xs):
            o.set_shape(x.shape)
        return outs

    if not _needs_gradient():
        return run(tensors)

    @tf.custom_gradient
    def fn(*xs):
        def grad(*dys):
            return _grouped_allreduce(list(dys), _grad_name(name, 'grad'), op, prescale_factor, postscale_factor,
                                      process_set)

        return run(list(xs)), grad

    return list(fn(*tensors))


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='', compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      name=None, ignore_name_scope=False):
    """Allreduces a list of tensors as one group (negotiated together, fused
    when they fit); returns a list. tf.IndexedSlices in the list are
    reduced as allreduce reduces them (gathered), the others as one group."""
    op = _np_ops.handle_average_backwards_compatibility(op, average)
    if not tensors:
        return []
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor)
    dense = [i for i in range(len(tensors)) if i not in set(sparse)]
    out = [None] * len(tensors)
    if dense:
        ts = [_tensor(tensors[i], 'tensors[%d]' % i) for i in dense]
        gname = _graph_name('GroupedAllreduce', ts[0], name)
        pairs = [compression.compress(t) for t in ts]
        reduced = _grouped_allreduce([p[0] for p in pairs], gname, op, prescale_factor, postscale_factor,
                                     process_set)
        for i, o, p in zip(dense, reduced, pairs):
            out[i] = compression.decompress(o, p[1])
    for i in sparse:
        out[i] = _allreduce_sparse(tensors[i], _grad_name(name, 'sparse%d' % i), op, process_set)
    return out


# ---------------------------------------------------------------- allgather

def _allgather(tensor, name, process_set):
    name = _graph_name('Allgather', tensor, name)
    if not _needs_gradient():
        return _run(lambda a: _ops.allgather(a, name=name, process_set=process_set), [tensor], tensor.dtype)

    @tf.custom_gradient
    def fn(x):
        y = _run(lambda a: _ops.allgather(a, name=name, process_set=process_set), [x], x.dtype)
        _gathered_shape(y, x)
        return y, lambda dy: _allgather_grad(x, dy, name, process_set)

    return fn(tensor)


def _gathered_shape(y, x):
    """y (gathered, scattered or exchanged along dimension 0) has x's
    dimensions after the first, as Horovod's ops declare."""
    if x.shape.rank is not None and x.shape.rank > 0:
        y.set_shape([None] + x.shape.as_list()[1:])


def _allgather_grad(x, dy, name, process_set):
    """Horovod's allgather gradient: the gradient averaged over the set,
    this rank's rows of it."""
    reduced = _allreduce(dy, _grad_name(name, 'grad'), Average, 1.0, 1.0, process_set)
    rows = tf.shape(x, out_type=tf.int64)[:1]
    counts = _run(lambda a: _ops.allgather(a, name=_grad_name(name, 'grad.rows'),
                                              process_set=process_set), [rows], tf.int64)
    r = process_set.rank()
    offset = tf.reduce_sum(counts[:r])
    return tf.slice(reduced, tf.concat([[offset], tf.zeros([tf.rank(dy) - 1], tf.int64)], 0),
                    tf.shape(x, out_type=tf.int64))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates the tensor of every member along dimension 0 (which may
    differ per rank)."""
    return _allgather(_tensor(tensor), name, process_set)


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgathers a list of tensors as one group; returns a list."""
    if not tensors:
        return []
    ts = [_tensor(t, 'tensors[%d]' % i) for i, t in enumerate(tensors)]
    name = _graph_name('GroupedAllgather', ts[0], name)

    def run(xs):
        outs = _run(lambda *arrs: _ops.grouped_allgather(list(arrs), name=name, process_set=process_set),
                    xs, [x.dtype for x in xs])
        for o, x in zip(outs, xs):
            _gathered_shape(o, x)
        return outs

    if not _needs_gradient():
        return run(ts)

    @tf.custom_gradient
    def fn(*xs):
        def grad(*dys):
            return [_allgather_grad(x, dy, _grad_name(name, str(i)), process_set)
                    for i, (x, dy) in enumerate(zip(xs, dys))]

        return run(list(xs)), grad

    return list(fn(*ts))


# ---------------------------------------------------------------- broadcast

def _broadcast(tensor, root_rank, name, process_set):
    name = _graph_name('Broadcast', tensor, name)
    if not _needs_gradient():
        return _run(lambda a: _ops.broadcast(a, root_rank, name=name, process_set=process_set), [tensor],
                    tensor.dtype)

    @tf.custom_gradient
    def fn(x):
        y = _run(lambda a: _ops.broadcast(a, root_rank, name=name, process_set=process_set), [x], x.dtype)
        y.set_shape(x.shape)

        def grad(dy):
            reduced = _allreduce(dy, _grad_name(name, 'grad'), Average, 1.0, 1.0, process_set)
            return reduced if rank() == root_rank else reduced * 0

        return y, grad

    return fn(tensor)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Returns root_rank's tensor on every member (root_rank is a global
    rank, a member of the set)."""
    return _broadcast(_tensor(tensor), root_rank, name, process_set)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts tf.Variables in place from root_rank; returns their values
    (in a graph: tensors that assign them when evaluated)."""
    assigned = _broadcast_assign(variables, root_rank, process_set, name)
    if tf.executing_eagerly():
        return [v.read_value() for v in variables]
    return assigned


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False, name=None):
    """Assigns root_rank's values to the variables on every member of the
    set (one grouped set of broadcasts, named after the variables). In a
    graph it returns the op that does it, as Horovod's."""
    assigned = _broadcast_assign(variables, root_rank, process_set, name)
    if not tf.executing_eagerly():
        return tf.group(*assigned) if assigned else tf.no_op()
    return None


def _broadcast_assign(variables, root_rank, process_set, name):
    variables = list(variables)
    if not variables:
        return []
    prefix = name or 'broadcast_variables'
    values = [_tensor(v.read_value() if hasattr(v, 'read_value') else v, 'variables[%d]' % i)
              for i, v in enumerate(variables)]
    names = ['%s.%d.%s' % (prefix, i, getattr(v, 'name', '')) for i, v in enumerate(variables)]

    def bcast(*arrs):
        handles = [_ops.broadcast_async(a, root_rank, name=n, process_set=process_set) for a, n in zip(arrs, names)]
        return [_np_ops.synchronize(h) for h in handles]

    outs = _run(bcast, values, [v.dtype for v in values])
    return [v.assign(tf.reshape(o, tf.shape(v))) for v, o in zip(variables, outs)]


# ----------------------------------------------------------------- alltoall

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends splits[i] rows (dimension 0) to the i-th member of the set;
    without splits dimension 0 is divided evenly. Returns the output, or
    (output, received_splits) when splits is given. The gradient sends the
    rows back (an alltoall with the received splits)."""
    t = _tensor(tensor)
    name = _graph_name('Alltoall', t, name)
    sp = tf.zeros([0], tf.int32) if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int32)

    def call(a, s):
        out, received = _np_ops.synchronize(
            _ops.alltoall_async(a, splits=s if s.size else None, name=name, process_set=process_set))
        return [out, received]

    received_box = []

    @tf.custom_gradient
    def fn(x):
        out, received = _run(call, [x, sp], [x.dtype, tf.int32])
        _gathered_shape(out, x)
        received.set_shape([process_set.size()])
        received_box.append(received)

        def grad(dy):
            back, _ = alltoall(dy, splits=received, name=_grad_name(name, 'grad'), process_set=process_set)
            return back

        return out, grad

    out = fn(t)
    return out if splits is None else (out, received_box[0])


# ------------------------------------------------------------ reducescatter

def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces the tensor over the set (Sum or Average) and returns this
    rank's rows: rank r of n gets d0//n + 1 rows if r < d0 % n, else d0//n."""
    t = _tensor(tensor)
    name = _graph_name('Reducescatter', t, name)
    compressed, ctx = compression.compress(t)

    @tf.custom_gradient
    def fn(x):
        y = _run(lambda a: _ops.reducescatter(a, name=name, op=op, process_set=process_set,
                                                 prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor), [x], x.dtype)
        _gathered_shape(y, x)
        return y, lambda dy: _reducescatter_grad(dy, name, op, prescale_factor, postscale_factor, process_set)

    return compression.decompress(fn(compressed), ctx)


def _reducescatter_grad(dy, name, op, prescale_factor, postscale_factor, process_set):
    if op == Sum:
        dy = dy * tf.cast(process_set.size(), dy.dtype)
    return _allgather(dy * tf.cast(prescale_factor * postscale_factor, dy.dtype),
                      _grad_name(name, 'grad'), process_set)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average, name=None,
                          process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of tensors as one group; returns a list."""
    if not tensors:
        return []
    ts = [_tensor(t, 'tensors[%d]' % i) for i, t in enumerate(tensors)]
    name = _graph_name('GroupedReducescatter', ts[0], name)
    pairs = [compression.compress(t) for t in ts]
    comp = [p[0] for p in pairs]

    def run(xs):
        outs = _run(lambda *arrs: _ops.grouped_reducescatter(list(arrs), name=name, op=op,
                                                                process_set=process_set,
                                                                prescale_factor=prescale_factor,
                                                                postscale_factor=postscale_factor),
                    xs, [x.dtype for x in xs])
        for o, x in zip(outs, xs):
            _gathered_shape(o, x)
        return outs

    if not _needs_gradient():
        outs = run(comp)
    else:
        @tf.custom_gradient
        def fn(*xs):
            def grad(*dys):
                return [_reducescatter_grad(dy, _grad_name(name, str(i)), op, prescale_factor, postscale_factor,
                                            process_set) for i, dy in enumerate(dys)]

            return run(list(xs)), grad

        outs = list(fn(*comp))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ----------------------------------------------------------- point-to-point

def _eager(what):
    if not tf.executing_eagerly():
        raise RuntimeError('hvd.tensorflow: %s runs in eager mode only, not inside tf.function' % what)


def _receiver(tensor):
    """The template tensor, an empty numpy buffer of its shape and dtype,
    and the function turning the filled buffer into recv's result."""
    t = _tensor(tensor)
    a = t.numpy()
    buf = _numpy.empty(a.shape, dtype=a.dtype)

    def result(filled):
        out = tf.convert_to_tensor(filled, dtype=t.dtype)
        if isinstance(tensor, tf.Variable):
            tensor.assign(out)
            return tensor
        return out

    return t, buf, result


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Posts a send of the tensor to global rank dst (a member of the set,
    not this rank) and returns a handle at once; synchronize(handle) waits
    until it is delivered and returns the tensor."""
    _eager('isend')
    t = _tensor(tensor)
    handle = _np_ops.isend(t.numpy(), dst, tag=tag, process_set=process_set)
    return _convert_result(handle, (tensor, t), lambda _: tensor)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Posts a receive from global rank src of a tensor shaped and typed as
    ``tensor`` (a template: its values are not used) and returns a handle
    at once; synchronize(handle) waits and returns the received tf.Tensor
    (or, for a tf.Variable, assigns it and returns the variable)."""
    _eager('irecv')
    t, buf, result = _receiver(tensor)
    handle = _np_ops.irecv(buf, src, tag=tag, process_set=process_set)
    return _convert_result(handle, (tensor, t), result)


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends the tensor to global rank dst; blocks until it is delivered
    (a large send may wait for the matching recv: post receives first, or
    use isend). Returns None."""
    _eager('send')
    _np_ops.send(_tensor(tensor).numpy(), dst, tag=tag, process_set=process_set)


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives from global rank src a tensor shaped and typed as ``tensor``
    (a template), blocking; returns it as a tf.Tensor (a tf.Variable is
    assigned it and returned)."""
    _eager('recv')
    _, buf, result = _receiver(tensor)
    return result(_np_ops.recv(buf, src, tag=tag, process_set=process_set))


# ------------------------------------------------- gradients, for the wrappers

def reduce_gradients(grads, sources, compression, sparse_as_dense, op, gradient_predivide_factor,
                     num_groups, groups, process_set, prefix):
    """Averages (or sums) the gradients over the set: every dense gradient
    in one batch of async allreduces (the engine fuses them), grouped when
    num_groups or groups ask for it. None gradients stay None."""
    if op == Average:
        # As Horovod: the 1/n of Average is split between pre- and postscale.
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale, postscale = 1.0, 1.0
    out = list(grads)
    dense, idx = [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            if not sparse_as_dense:
                out[i] = allreduce(g, op=op, name='%s.%d' % (prefix, i), process_set=process_set)
                continue
            g = tf.convert_to_tensor(g)
        dense.append(g)
        idx.append(i)
    if not dense:
        return out
    pairs = [compression.compress(_tensor(g, 'gradient %d' % i)) for g, i in zip(dense, idx)]
    comp = [p[0] for p in pairs]
    names = ['%s.%d.%s' % (prefix, i, getattr(sources[i], 'name', '')) if sources is not None else '%s.%d' % (prefix, i)
             for i in idx]
    if groups is not None:
        var_group = {}
        for gi, group in enumerate(groups):
            for v in group:
                var_group[id(v)] = gi
        bucket = [var_group.get(id(sources[i]), -1 - k) for k, i in enumerate(idx)]
    elif num_groups and num_groups > 0:
        per = -(-len(comp) // num_groups)
        bucket = [k // per for k in range(len(comp))]
    else:
        bucket = [-1 - k for k in range(len(comp))]  # every gradient on its own

    def reduce_all(*arrs):
        order, handles = {}, []
        for k, a in enumerate(arrs):
            order.setdefault(bucket[k], []).append(k)
        results = [None] * len(arrs)
        for b, ks in order.items():
            if len(ks) == 1 or b < 0:
                for k in ks:
                    handles.append(([k], _ops.allreduce_async(arrs[k], name=names[k], op=op,
                                                                 prescale_factor=prescale,
                                                                 postscale_factor=postscale,
                                                                 process_set=process_set)))
            else:
                handles.append((ks, _ops.grouped_allreduce_async([arrs[k] for k in ks],
                                                                    name='%s.group%d' % (prefix, b), op=op,
                                                                    prescale_factor=prescale,
                                                                    postscale_factor=postscale,
                                                                    process_set=process_set)))
        for ks, h in handles:
            res = _np_ops.synchronize(h)
            if len(ks) == 1 and not isinstance(res, list):
                res = [res]
            for k, r in zip(ks, res):
                results[k] = r
        return results

    reduced = _run(reduce_all, comp, [c.dtype for c in comp])
    for k, (i, r) in enumerate(zip(idx, reduced)):
        r.set_shape(comp[k].shape)
        out[i] = compression.decompress(r, pairs[k][1])
    return out


def check_reduction(op, gradient_predivide_factor, num_groups, groups, what):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if op not in (Average, Sum):
        raise ValueError('%s supports op=Average and op=Sum, not %r' % (what, op))
    if groups is not None:
        if not (isinstance(groups, list) and all(isinstance(g, list) for g in groups)):
            raise ValueError('groups should be a list of lists of variables')
        if num_groups:
            raise ValueError('Use either groups or num_groups, not both')


def check_passes(backward_passes_per_step, what):
    if backward_passes_per_step != 1:
        raise NotImplementedError(
            'hvd.tensorflow: %s(backward_passes_per_step=%r): only 1 is supported '
            '(accumulate the gradients yourself and apply them every N steps)'
            % (what, backward_passes_per_step))
