"""hvd.tensorflow.keras.callbacks: Horovod's Keras callbacks on hvd's engine
(written by hvd-plugin-tensorflow with hvd.tensorflow)."""
import numpy as np
import tensorflow as tf

import hvd.tensorflow as _hvd


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Makes every rank start from root_rank's state: the model's variables
    are broadcast when training begins (when the model is already built),
    and the model's and the optimizer's (whose slots exist only after the
    first step) at the end of the first batch, as Horovod's. Put it first in
    the callback list. local_variables (a variable or a list) are left out:
    each rank keeps its own."""

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self.local_refs = {v.ref() for v in local_variables}

    def _shared(self, variables):
        return [v for v in variables if v.ref() not in self.local_refs]

    def on_train_begin(self, logs=None):
        # A model built on its first batch has no variables yet: the end of
        # that batch broadcasts them.
        if getattr(self.model, 'built', False) and self.model.variables:
            _hvd.broadcast_variables(self._shared(self.model.variables), root_rank=self.root_rank,
                                     name='BroadcastGlobalVariablesCallback.begin')

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        _hvd.broadcast_variables(self._shared(self.model.variables), root_rank=self.root_rank,
                                 name='BroadcastGlobalVariablesCallback.model')
        opt = getattr(self.model, 'optimizer', None)
        if opt is not None:
            variables = opt.variables() if callable(opt.variables) else opt.variables
            if variables:
                _hvd.broadcast_variables(variables, root_rank=self.root_rank,
                                         name='BroadcastGlobalVariablesCallback.optimizer')
        self.broadcast_done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Averages the epoch's metrics (the numbers in logs) over all ranks at
    the end of every epoch, so that every rank logs, checkpoints and
    schedules on the same values. Put it before the callbacks that read
    the metrics (ReduceLROnPlateau, ModelCheckpoint, ...)."""

    def __init__(self, device=''):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.isscalar(np.asarray(v).item()))
        if not keys:
            return
        values = tf.constant([float(logs[k]) for k in keys], dtype=tf.float64)
        avg = _hvd.allreduce(values, op=_hvd.Average, name='MetricAverageCallback.%d' % epoch).numpy()
        for k, v in zip(keys, avg):
            logs[k] = float(v)


def _get_lr(optimizer):
    return float(tf.keras.backend.get_value(optimizer.learning_rate))


def _set_lr(optimizer, value):
    lr = optimizer.learning_rate
    if isinstance(lr, tf.Variable):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


class LearningRateScheduleCallback(tf.keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) for epochs
    in [start_epoch, end_epoch) (Horovod's). multiplier is a number or a
    function of the epoch; with staircase=False the epoch is fractional
    (epoch + batch / steps_per_epoch, steps_per_epoch taken from fit's
    params when not given) and the rate changes every batch.
    momentum_correction is accepted for Horovod's signature: the Keras 2.11+
    optimizers keep momentum constant, so it has nothing to correct."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if not callable(multiplier):
            self.staircase = True
            self.multiplier = lambda epoch: multiplier
        else:
            self.multiplier = multiplier
        if self.initial_lr is None:
            raise ValueError('Parameter `initial_lr` is required')

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        _set_lr(self.model.optimizer, self.initial_lr * self.multiplier(epoch))

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = (self.params or {}).get('steps')
            if not self.steps_per_epoch:
                raise ValueError('LearningRateScheduleCallback(staircase=False) needs steps_per_epoch '
                                 '(fit did not say how many steps an epoch has)')

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if not self._in_range(self.current_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust(self.current_epoch)
        elif not self.staircase:
            self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs['lr'] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size() to initial_lr over
    warmup_epochs (Goyal et al., as Horovod's): initial_lr is the rate
    already scaled by the number of ranks."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Adjust epoch to produce round numbers at the end of each epoch.
            epoch += 1. / self.steps_per_epoch
            return 1. / _hvd.size() * (epoch * (_hvd.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _hvd.rank() == 0:
            print('\nEpoch %d: finished gradual learning rate warmup to %g.' % (epoch + 1, _get_lr(self.model.optimizer)))
