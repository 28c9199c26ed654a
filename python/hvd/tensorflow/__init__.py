"""hvd.tensorflow: Horovod's TensorFlow 2 API on hvd's Go engine.

``import hvd.tensorflow as hvd`` replaces ``import horovod.tensorflow as hvd``.

The source is python/hvd/tensorflow; hvd-plugin-tensorflow embeds it and
`hvdgen plugin install tensorflow` writes it, with hvd.tensorflow._plugin
(the versions and dtypes the plugin describes), into the environment.

How it runs: every collective hands its tensors to hvd.numpy, which runs
them through the engine in libhvd.so, the same engine as hvd.torch. CPU
tensors go both ways without a copy: an input is read in place (a numpy
view over the tensor's buffer, memoryview(tensor)) and the engine's output
becomes a tf.Tensor through DLPack (tf.experimental.dlpack.from_dlpack over
the array the engine wrote). Allgather, alltoall and reducescatter copy
their output once out of the engine, as in hvd.torch. In eager mode an op
runs at once; inside tf.function each collective becomes a tf.py_function:
graphs (and Keras model.fit) work, but the op is a Python call the graph
waits on, it cannot be compiled with XLA (jit_compile=True fails on it), and
a graph that is saved (SavedModel) cannot be served without this Python.
Gradients flow through allreduce, allgather, broadcast, alltoall and
reducescatter as in Horovod. GPU tensors are copied to the host and back.

Point-to-point (hvd's, not Horovod's; see hvd.torch's for the rules):
isend/irecv return handles, send/recv block, eager mode only, and no
gradient flows through them (a pipeline stage asks its tape for the
gradients and sends them itself). Tensors are immutable, so irecv and recv
take a template tensor (its shape and dtype; a tf.Variable is assigned the
received value) and the received tensor is what synchronize / recv return.

Not provided (Horovod has them): TF1 session hooks
(BroadcastGlobalVariablesHook), backward_passes_per_step > 1 outside Keras optimizers
(DistributedGradientTape, tf.compat.v1 optimizers), the Adasum delta
optimizer (allreduce with op=hvd.Adasum works), elastic state for TF1
sessions (hvd.elastic has the eager TensorFlowState and TensorFlowKerasState).
"""
import numpy as _numpy
import tensorflow as tf

import hvd.numpy as _np_ops
from hvd.common.process_sets import registered as _registered_sets
from hvd.numpy import mpi_ops  # noqa: F401  (hvd.mpi_ops._basics, as in horovod.tensorflow)
from hvd.numpy import (init, shutdown, is_initialized, start_timeline, stop_timeline, size,  # noqa: F401
                       local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
                       mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
                       nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
                       HorovodInternalError, HostsUpdatedInterrupt,
                       ProcessSet, global_process_set, add_process_set, remove_process_set,
                       Average, Sum, Adasum, Min, Max, Product,
                       join, barrier, poll, synchronize)
from hvd.tensorflow.collectives import (  # noqa: F401
    Compressor, NoneCompressor, FP16Compressor, Compression, allreduce, grouped_allreduce, allgather,
    grouped_allgather, broadcast, broadcast_, broadcast_variables, alltoall, reducescatter, grouped_reducescatter,
    isend, irecv, send, recv)
from hvd.tensorflow.collectives import as_numpy as _as_numpy, to_tf as _to_tf  # noqa: F401  (zero copy; tests check)
from hvd.tensorflow.collectives import reduce_gradients, check_reduction, check_passes
from hvd.tensorflow.collectives import MismatchError, InvalidArgumentError  # noqa: F401
from hvd.tensorflow.util import executing_eagerly as _executing_eagerly  # noqa: F401  (horovod.tensorflow has it; its tests call it)
from hvd.tensorflow.optimizer import Reducer, keras_optimizer, local_layer_weights
from hvd.tensorflow import elastic  # noqa: F401  (hvd.elastic.run, TensorFlowKerasState, TensorFlowState)
from hvd.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401


class _DistributedGradientTape(tf.GradientTape):
    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, num_groups, groups, process_set, persistent=False,
                 watch_accessed_variables=True):
        if hasattr(tape, '_watch_accessed_variables'):
            super(self.__class__, self).__init__(persistent, watch_accessed_variables)
        else:
            super(self.__class__, self).__init__(persistent)
        self._tape = tape
        self._hvd = dict(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                         gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
                         groups=groups, process_set=process_set)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        gradients = super(self.__class__, self).gradient(target, sources, output_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat = tf.nest.flatten(gradients)
        reduced = self._hvd_reducer(flat, flat_sources)
        return tf.nest.pack_sequence_as(gradients, reduced)

    def register_local_source(self, source):
        """Keeps source's gradient local: not reduced, divided by the set's
        size unless scale_local_gradients=False (Horovod's)."""
        self._hvd_reducer.local.add(source.ref())

    def get_local_and_global_gradients(self, target, sources, output_gradients=None):
        """Horovod's: the gradients of the registered local sources (kept
        local, scaled as gradient() scales them) and of the others (reduced),
        as two lists of (source, gradient)."""
        flat_sources = tf.nest.flatten(sources)
        grads = tf.nest.flatten(super(self.__class__, self).gradient(target, sources, output_gradients))
        reduced = self._hvd_reducer(grads, flat_sources)
        local, other = [], []
        for source, grad in zip(flat_sources, reduced):
            (local if source.ref() in self._hvd_reducer.local else other).append((source, grad))
        return local, other


def DistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wraps a tf.GradientTape so that gradient() returns gradients averaged
    (op=Average, or summed with op=Sum) over the process set, as Horovod's.

    gradient_predivide_factor splits the averaging into a division before
    and after the sum; num_groups / groups allreduce the gradients in that
    many groups (or in the given lists of variables) instead of one by one.
    register_local_source(v) keeps a source's gradient local.
    """
    check_reduction(op, gradient_predivide_factor, num_groups, groups, 'DistributedGradientTape')
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,), dict(_DistributedGradientTape.__dict__))
    if hasattr(gradtape, '_watch_accessed_variables'):
        tape = cls(gradtape._tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                   gradient_predivide_factor, num_groups, groups, process_set, gradtape._persistent,
                   gradtape._watch_accessed_variables)
    else:
        tape = cls(gradtape._tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                   gradient_predivide_factor, num_groups, groups, process_set, gradtape._persistent)
    tape._hvd_reducer = Reducer('DistributedGradientTape', tape._hvd,
                                process_set.size() if scale_local_gradients else 1)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose gradients for the trainable weights
    of local_layers (a Keras layer or a list) stay local (Horovod's)."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for var in local_layer_weights(local_layers, 'PartialDistributedGradientTape'):
        tape.register_local_source(var)
    return tape


# ------------------------------------------------------- DistributedOptimizer

class _DistributedV1Optimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose compute_gradients returns the
    gradients reduced over the process set (Horovod's TF1 optimizer)."""

    def __init__(self, optimizer, name, use_locking, reduction):
        self._optimizer = optimizer
        self._reduction = reduction
        super().__init__(name=name or 'Distributed%s' % type(optimizer).__name__, use_locking=use_locking)

    def compute_gradients(self, *args, **kwargs):
        gv = list(self._optimizer.compute_gradients(*args, **kwargs))
        variables = [v for _, v in gv]
        grads = reduce_gradients([g for g, _ in gv], variables, prefix='DistributedOptimizer', **self._reduction)
        return list(zip(grads, variables))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wraps an optimizer so that the gradients it applies are averaged (or
    summed) over the process set, as Horovod's: a Keras optimizer becomes
    hvd.tensorflow.keras.DistributedOptimizer's, a tf.compat.v1.train
    optimizer one whose compute_gradients reduces."""
    check_reduction(op, gradient_predivide_factor, num_groups, groups, 'DistributedOptimizer')
    if isinstance(optimizer, tf.keras.optimizers.Optimizer) or (
            hasattr(tf.keras.optimizers, 'legacy') and isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer)):
        return keras_optimizer(optimizer, 'DistributedOptimizer' if name is None else name, dict(
            compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups, groups=groups,
            process_set=process_set), backward_passes_per_step, average_aggregated_gradients, scale_local_gradients)
    check_passes(backward_passes_per_step, 'DistributedOptimizer')
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise TypeError('hvd.tensorflow.DistributedOptimizer: expected a tf.keras or tf.compat.v1.train '
                        'optimizer, not %s' % type(optimizer).__name__)
    return _DistributedV1Optimizer(optimizer, name, use_locking, dict(
        compression=compression, sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups, groups=groups,
        process_set=process_set))


# -------------------------------------------------- graph-mode query helpers

def _int_op(fn, name):
    if tf.executing_eagerly():
        return tf.constant(fn(), dtype=tf.int32, name=name)
    return tf.reshape(tf.py_function(lambda: _numpy.int32(fn()), [], tf.int32, name=name), [])


def size_op(process_set_id=0, name=None):
    """The size of the process set as an int32 scalar tensor, evaluated when
    the graph runs (a constant in eager mode)."""
    return _int_op(lambda: size() if process_set_id == 0 else _member_count(process_set_id), name)


def _member_count(process_set_id):
    for ps_id, ranks in _registered_sets().items():
        if ps_id == process_set_id:
            return len(ranks)
    raise ValueError('hvd.tensorflow: no process set with id %d' % process_set_id)


def local_size_op(name=None):
    """local_size() as an int32 scalar tensor."""
    return _int_op(local_size, name)


def rank_op(name=None):
    """rank() as an int32 scalar tensor."""
    return _int_op(rank, name)


def local_rank_op(name=None):
    """local_rank() as an int32 scalar tensor."""
    return _int_op(local_rank, name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this rank is in the process set, else 0, as an int32 scalar
    tensor (Horovod's)."""
    def included():
        for ps_id, ranks in _registered_sets().items():
            if ps_id == process_set_id:
                return int(rank() in ranks)
        raise ValueError('hvd.tensorflow: no process set with id %d' % process_set_id)
    return _int_op(included, name)


def broadcast_global_variables(root_rank):
    """Horovod's TF1 helper: in a graph, the op that broadcasts every global
    variable (tf.compat.v1.global_variables()) from root_rank. In eager
    mode it is refused as Horovod refuses it: broadcast the variables you
    hold."""
    if tf.executing_eagerly():
        raise RuntimeError('hvd.broadcast_global_variables() does not support eager execution. '
                           'Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.')
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Serializes obj on root_rank and returns it on every member of the
    set (session is accepted for Horovod's signature and unused)."""
    return _np_ops.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every member's obj, in set-rank order."""
    return _np_ops.allgather_object(obj, name=name, process_set=process_set)
