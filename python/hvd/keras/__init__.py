"""hvd.keras: Horovod's Keras API under its other name (horovod.keras), the
same module as hvd.tensorflow.keras (tf.keras is the Keras this supports).
Written by hvd-plugin-tensorflow with hvd.tensorflow."""
from hvd.tensorflow.keras import *  # noqa: F401,F403
from hvd.tensorflow.keras import (DistributedOptimizer, PartialDistributedOptimizer, load_model,  # noqa: F401
                                  broadcast_global_variables)
from hvd.tensorflow.keras import allreduce, allgather, broadcast, reducescatter  # noqa: F401
from hvd.keras import callbacks  # noqa: F401
from hvd.tensorflow.keras import elastic  # noqa: F401
