# Horovod's examples/tensorflow2/tensorflow2_synthetic_benchmark.py, rewritten
# for hvd: the only hvd-specific line is the import (horovod.tensorflow ->
# hvd.tensorflow). Differences from Horovod's, none of them hvd's: the image
# size and the model are flags (the CI runs a small MobileNet on 32x32
# images), the optimizer's variables are a property in TensorFlow 2.11+, and
# the run ends with the per-rank loss printed so the test can compare ranks.
import argparse
import os
import timeit

import numpy as np
import tensorflow as tf
from tensorflow.keras import applications

import hvd.tensorflow as hvd

parser = argparse.ArgumentParser(description='TensorFlow Synthetic Benchmark',
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='compress gradients to float16 for the allreduce')
parser.add_argument('--model', type=str, default='ResNet50', help='a tf.keras.applications model')
parser.add_argument('--image-size', type=int, default=224, help='height and width of the synthetic images')
parser.add_argument('--batch-size', type=int, default=32, help='input batch size')
parser.add_argument('--num-warmup-batches', type=int, default=10, help='batches before timing starts')
parser.add_argument('--num-batches-per-iter', type=int, default=10, help='batches per timed iteration')
parser.add_argument('--num-iters', type=int, default=10, help='timed iterations')
parser.add_argument('--no-cuda', action='store_true', default=False, help='train on the CPU')
args = parser.parse_args()
args.cuda = not args.no_cuda

hvd.init()

# One GPU per process, when there are GPUs.
if args.cuda:
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')
else:
    os.environ['CUDA_VISIBLE_DEVICES'] = '-1'

model = getattr(applications, args.model)(weights=None, input_shape=(args.image_size, args.image_size, 3),
                                          classes=1000)
opt = tf.optimizers.SGD(0.01)
data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64)


@tf.function
def benchmark_step(first_batch):
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    with tf.GradientTape() as tape:
        probs = model(data, training=True)
        loss = tf.losses.sparse_categorical_crossentropy(target, probs)
    # The tape averages the gradients over all ranks.
    tape = hvd.DistributedGradientTape(tape, compression=compression)
    gradients = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    # Start every rank from rank 0's state; after the first step, so that the
    # optimizer's slots exist.
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables() if callable(opt.variables) else opt.variables, root_rank=0)
    return tf.reduce_mean(loss)


def log(s):
    if hvd.rank() == 0:
        print(s, flush=True)


log('Model: %s' % args.model)
log('Batch size: %d' % args.batch_size)
device = 'GPU' if args.cuda else 'CPU'
log('Number of %ss: %d' % (device, hvd.size()))

with tf.device(device):
    log('Running warmup...')
    benchmark_step(first_batch=True)
    timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)
    log('Running benchmark...')
    img_secs = []
    for x in range(args.num_iters):
        time = timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / time
        log('Iter #%d: %.1f img/sec per %s' % (x, img_sec, device))
        img_secs.append(img_sec)
    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log('Img/sec per %s: %.1f +-%.1f' % (device, img_sec_mean, img_sec_conf))
    log('Total img/sec on %d %s(s): %.1f +-%.1f' %
        (hvd.size(), device, hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))

# Every rank applied the same averaged gradients to the same weights.
digest = float(sum(tf.reduce_sum(tf.cast(v, tf.float64)) for v in model.trainable_variables))
print('rank %d weights digest %.10e' % (hvd.rank(), digest), flush=True)
