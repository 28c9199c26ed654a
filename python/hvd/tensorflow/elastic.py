"""hvd.tensorflow.elastic: Horovod's elastic state for TensorFlow
(horovod.tensorflow.elastic): TensorFlowKerasState (a Keras model and its
optimizer plus picklable attributes), TensorFlowState (a list of variables
plus attributes), and run, the ``@hvd.elastic.run`` decorator. See
docs/elastic.md for the loop: sync from rank 0, restore the last commit on
a failure, reset to the next world.

save() keeps host copies of the variables' values; restore() assigns them
back; sync() broadcasts rank 0's variables (model, then optimizer) and
attributes. Optimizer slots that appear after a save (Keras creates them at
the first step) are left alone by restore()."""
import numpy as np

from hvd.common.elastic import ObjectState as _ObjectStateBase, run_fn
from hvd.numpy import broadcast_object, rank
from hvd.tensorflow.collectives import broadcast_variables


def _values(variables):
    return [np.array(v.numpy(), copy=True) for v in variables]


def _assign(variables, values):
    if len(values) != len(variables):
        return  # the set changed (optimizer slots made after the save): keep what there is
    for v, value in zip(variables, values):
        v.assign(value)


class TensorFlowState(_ObjectStateBase):
    """The state of a list of tf.Variables and picklable keyword attributes."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError('hvd.tensorflow.elastic.TensorFlowState: TF1 sessions are not supported (eager only)')
        self.variables = list(variables or [])
        self._saved_values = _values(self.variables)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        self._saved_values = _values(self.variables)
        super().save()

    def restore(self):
        _assign(self.variables, self._saved_values)
        super().restore()

    def sync(self):
        if self.variables:
            broadcast_variables(self.variables, root_rank=0, name='elastic.TensorFlowState')
        self._saved_values = _values(self.variables)
        super().sync()


class TensorFlowKerasState(_ObjectStateBase):
    """The state of a Keras model, its optimizer (model.optimizer when not
    given) and picklable keyword attributes (batch=0, epoch=0, ...)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, 'optimizer', None)
        self._saved_model = _values(self.model.variables)
        self._saved_optimizer = _values(self._optimizer_variables())
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _optimizer_variables(self):
        if self.optimizer is None:
            return []
        variables = self.optimizer.variables
        return list(variables() if callable(variables) else variables)

    def save(self):
        self._saved_model = _values(self.model.variables)
        self._saved_optimizer = _values(self._optimizer_variables())
        super().save()

    def restore(self):
        _assign(self.model.variables, self._saved_model)
        _assign(self._optimizer_variables(), self._saved_optimizer)
        super().restore()

    def sync(self):
        broadcast_variables(self.model.variables, root_rank=0, name='elastic.KerasState.model')
        opt = self._optimizer_variables()
        if opt:
            broadcast_variables(opt, root_rank=0, name='elastic.KerasState.optimizer')
        self._saved_model = _values(self.model.variables)
        self._saved_optimizer = _values(opt)
        super().sync()


def run(func):
    """Decorator of the training function (Horovod's hvd.elastic.run)."""
    return run_fn(func)
