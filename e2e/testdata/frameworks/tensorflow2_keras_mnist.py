# Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py, rewritten for
# hvd: the only hvd-specific line is the import (horovod.tensorflow.keras ->
# hvd.tensorflow.keras). Differences from Horovod's, none of them hvd's: the
# data are synthetic MNIST-shaped images whose label is a function of the
# image (the CI machines do not download MNIST), the epochs and steps are
# flags, compile drops experimental_run_tf_function (TensorFlow 2.15's Keras
# refuses it), and the checkpoint goes to a temporary directory.
import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf

import hvd.tensorflow.keras as hvd

parser = argparse.ArgumentParser()
parser.add_argument('--epochs', type=int, default=24)
parser.add_argument('--steps', type=int, default=500)
args = parser.parse_args()

hvd.init()

gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

# Synthetic MNIST: 28x28 images, the label is the brightest of ten bands.
rng = np.random.default_rng(hvd.rank())
images = rng.random((2048, 28, 28)).astype(np.float32)
bands = images[:, :20, :].reshape(2048, 10, 56).mean(axis=2)
labels = bands.argmax(axis=1).astype(np.int64)
images[np.arange(2048), labels * 2, :] += 1.0  # make the band clearly brightest
dataset = tf.data.Dataset.from_tensor_slices((images[..., tf.newaxis], labels))
dataset = dataset.repeat().shuffle(2048).batch(128)

mnist_model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(8, [3, 3], activation='relu'),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Dropout(0.25),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(32, activation='relu'),
    tf.keras.layers.Dense(10, activation='softmax')
])

# Scale the learning rate by the number of workers.
scaled_lr = 0.001 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)
opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1, average_aggregated_gradients=True)
mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=['accuracy'])

callbacks = [
    # Start every worker from rank 0's weights.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Average the metrics over the workers at the end of every epoch; before
    # any callback that reads them.
    hvd.callbacks.MetricAverageCallback(),
    # Ramp the learning rate up to scaled_lr over the first epochs.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=min(3, args.epochs), verbose=1),
]
if hvd.rank() == 0:  # checkpoints on worker 0 only
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(tempfile.mkdtemp(), 'checkpoint-{epoch}.h5')))

verbose = 2 if hvd.rank() == 0 else 0
hist = mnist_model.fit(dataset, steps_per_epoch=args.steps // hvd.size(), callbacks=callbacks, epochs=args.epochs,
                       verbose=verbose)
print('rank %d final accuracy %.4f loss %.4f first loss %.4f' % (
    hvd.rank(), hist.history['accuracy'][-1], hist.history['loss'][-1], hist.history['loss'][0]), flush=True)
