"""hvd.tensorflow.keras.elastic (also hvd.keras.elastic): Horovod's elastic
Keras API: KerasState, the callbacks that keep it current during model.fit
(CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback)
and run. See hvd.tensorflow.elastic and docs/elastic.md."""
import tensorflow as tf

from hvd.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401


class KerasState(TensorFlowKerasState):
    """The state of a Keras model, its optimizer and attributes:
    KerasState(model, optimizer=None, batch=0, epoch=0)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(tf.keras.callbacks.Callback):
    """Commits the state every batches_per_commit batches and at the end
    of every epoch (a commit is a collective: every rank runs it)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError('batches_per_commit must be at least 1, not %r' % batches_per_commit)
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(tf.keras.callbacks.Callback):
    """Keeps state.batch at the last finished batch of the epoch (0 after
    the epoch), and after a reset shortens the epoch by the batches done."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get('steps'):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get('steps')
            self.params['steps'] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(tf.keras.callbacks.Callback):
    """Keeps state.epoch at the next epoch to run, counted across resets
    (Keras numbers each fit's epochs from 0)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1
