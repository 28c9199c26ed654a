"""hvd.tensorflow.SyncBatchNormalization: Keras batch normalization whose
batch statistics are those of the whole process set's batch (Horovod's
horovod.tensorflow.SyncBatchNormalization).

In training, each rank's mean and mean of squares over its own batch are
averaged over the set (two allreduces, which carry the gradient back to
every rank's inputs); the variance is the averaged mean of squares minus the
squared averaged mean. That is the whole batch's statistics when every rank
has the same batch size, as Horovod assumes. Inference uses the moving
statistics, identical on every rank because they are updated from the same
averaged values."""
import tensorflow as tf

from hvd.numpy import Average, global_process_set
from hvd.tensorflow.collectives import allreduce


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """tf.keras.layers.BatchNormalization (not fused) with the statistics
    synchronized over process_set."""

    def __init__(self, fused=False, process_set=global_process_set, **kwargs):
        if fused in (True, None):
            raise ValueError('SyncBatchNormalization does not support fused=True')
        kwargs.setdefault('name', 'sync_batch_normalization')
        super().__init__(fused=False, **kwargs)
        self._process_set = process_set

    def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, **kwargs):
        mean, variance = super()._calculate_mean_and_var(inputs, reduction_axes, keep_dims, **kwargs)
        if self._process_set.size() <= 1:
            return mean, variance
        mean_of_square = variance + tf.math.square(mean)
        group_mean = allreduce(mean, op=Average, process_set=self._process_set)
        group_mean_of_square = allreduce(mean_of_square, op=Average, process_set=self._process_set)
        return group_mean, group_mean_of_square - tf.math.square(group_mean)
