"""hvd.tensorflow.keras: Horovod's tf.keras API (horovod.tensorflow.keras)
on hvd's engine.

``import hvd.tensorflow.keras as hvd`` replaces
``import horovod.tensorflow.keras as hvd``. Written by hvd-plugin-tensorflow
with hvd.tensorflow (source: python/hvd/tensorflow/keras).

DistributedOptimizer wraps a tf.keras optimizer (Keras 2: the optimizers of
TensorFlow 2.12-2.15, new and legacy) so that apply_gradients applies the
gradients averaged over the process set; model.fit's train step runs in a
tf.function, where the reduction is one tf.py_function per step with every
gradient in it (one batch of async allreduces, fused by the engine). Not
supported: backward_passes_per_step > 1, jit_compile=True for the model.
"""
import tensorflow as tf

import hvd.tensorflow as _hvd
from hvd.tensorflow import (init, shutdown, is_initialized, start_timeline, stop_timeline, size,  # noqa: F401
                            local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
                            mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
                            nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
                            ProcessSet, global_process_set, add_process_set, remove_process_set,
                            Average, Sum, Adasum, Min, Max, Product, Compression,
                            allgather_object, broadcast_object, join, barrier)
from hvd.tensorflow.collectives import check_reduction
from hvd.tensorflow.optimizer import keras_optimizer, local_layer_weights
from hvd.tensorflow.keras import callbacks  # noqa: F401
from hvd.tensorflow.keras import elastic  # noqa: F401  (KerasState and its callbacks)


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=global_process_set, scale_local_gradients=True):
    """A copy of the Keras optimizer (same class name and config) whose
    apply_gradients first averages (op=Average) or sums (op=Sum) the
    gradients over the process set. Wrap the optimizer before
    model.compile; every rank must wrap the same optimizer for the same
    variables (the gradients are matched by position and variable name)."""
    check_reduction(op, gradient_predivide_factor, num_groups, groups, 'DistributedOptimizer')
    return keras_optimizer(optimizer, 'DistributedOptimizer' if name is None else name, dict(
        compression=compression, sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups, groups=groups,
        process_set=process_set), backward_passes_per_step, average_aggregated_gradients, scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                                compression=Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=Average, backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose gradients for the trainable weights of
    local_layers (a layer or a list of them) stay worker-local: not
    reduced, divided by the set's size unless scale_local_gradients=False
    (model parallelism: layers that differ per rank)."""
    opt = DistributedOptimizer(optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               backward_passes_per_step=backward_passes_per_step,
                               average_aggregated_gradients=average_aggregated_gradients, groups=groups,
                               process_set=process_set, scale_local_gradients=scale_local_gradients)
    for var in local_layer_weights(local_layers, 'PartialDistributedOptimizer'):
        opt.register_local_var(var)
    return opt


def broadcast_global_variables(root_rank):
    """Horovod's Keras helper for TF1 sessions; refused in TF2 (use the
    BroadcastGlobalVariablesCallback or hvd.broadcast_variables)."""
    return _hvd.broadcast_global_variables(root_rank)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none, process_set=global_process_set):
    """Reduces a value (tensor, array or number) over the set and returns a
    numpy array, as horovod.tensorflow.keras.allreduce."""
    return _hvd.allreduce(tf.constant(value), name=name, average=average, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, op=op, compression=compression,
                          process_set=process_set).numpy()


def allgather(value, name=None, process_set=global_process_set):
    """Concatenates every member's value along dimension 0; a numpy array."""
    return _hvd.allgather(tf.constant(value), name=name, process_set=process_set).numpy()


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """root_rank's value on every member; a numpy array."""
    return _hvd.broadcast(tf.constant(value), root_rank, name=name, process_set=process_set).numpy()


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """This rank's share of the reduced value; a numpy array."""
    return _hvd.reducescatter(tf.constant(value), name=name, op=op, process_set=process_set).numpy()


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none):
    """tf.keras.models.load_model with the saved optimizer wrapped in
    DistributedOptimizer (Horovod's): the Keras optimizers, plus
    custom_optimizers (classes), are deserialized wrapped."""
    def wrap(cls):
        return lambda **kwargs: DistributedOptimizer(cls(**kwargs), compression=compression)

    optimizers = [c for c in _keras_optimizer_classes()]
    if custom_optimizers is not None:
        optimizers += list(custom_optimizers)
    objects = {}
    for cls in optimizers:
        objects[cls.__name__] = wrap(cls)
        objects[cls.__name__.lower()] = wrap(cls)
    if custom_objects is not None:
        objects.update(custom_objects)
    return tf.keras.models.load_model(filepath, custom_objects=objects)


def _keras_optimizer_classes():
    mod = tf.keras.optimizers
    out = []
    for n in dir(mod):
        c = getattr(mod, n)
        if isinstance(c, type) and issubclass(c, mod.Optimizer) and c is not mod.Optimizer:
            out.append(c)
    return out
