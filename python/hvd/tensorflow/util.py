"""hvd.tensorflow.util: the helpers Horovod's TensorFlow code and tests import
from horovod.tensorflow.util."""
import tensorflow as tf


def executing_eagerly():
    """Whether ops run eagerly here (False inside a tf.function or a TF1 graph)."""
    return tf.executing_eagerly()


_executing_eagerly = executing_eagerly  # horovod.tensorflow.util's name


def vars_to_refs(variables):
    """The hashable references of variables (tf.Variable.ref())."""
    if isinstance(variables, list):
        return [v.ref() for v in variables]
    return variables.ref()


def refs_to_vars(refs):
    """The variables behind references made by vars_to_refs."""
    if isinstance(refs, list):
        return [r.deref() for r in refs]
    return refs.deref()
