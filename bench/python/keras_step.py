"""One Keras model.fit training step, distributed two ways (issue 24): hvd's
DistributedOptimizer (--impl hvd, under hvdrun) or TensorFlow's own
MultiWorkerMirroredStrategy (--impl mwms, one process per worker, TF_CONFIG
set by the caller, CPU collectives over gRPC with the RING implementation).
keras_vs_mwms.sh runs the two side by side.

Both run the same model on the same synthetic data with the same optimizer:
--batch is the per-worker batch (the global batch is batch x workers; MWMS
gets it through distribute_datasets_from_function, each worker's pipeline
making per-replica batches), the loss is averaged over the global batch in
both (hvd averages the gradients; MWMS scales each replica's loss by 1/n and
sums). No compiled metrics: MWMS would reduce them across workers every
step, hvd not at all.

The step time is the time between consecutive on_train_batch_end calls of
one model.fit, after --warmup steps (tracing, first allocations); prints on
worker 0 `keras_step IMPL MODEL median_ms p25_ms p75_ms steps` (then, in
parentheses, the settings, how often Keras traced its train function and the
slowest timed step) and, as a check, the workers' weight checksums agree (hvd: allgather_object; MWMS
keeps its replicas identical by construction)."""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

p = argparse.ArgumentParser()
p.add_argument('--impl', choices=('hvd', 'mwms'), required=True)
p.add_argument('--model', choices=('cnn', 'mlp'), default='cnn')
p.add_argument('--batch', type=int, default=32, help='per-worker batch')
p.add_argument('--steps', type=int, default=100, help='timed steps')
p.add_argument('--warmup', type=int, default=10)
p.add_argument('--optimizer', choices=('adam', 'legacy-adam', 'sgd'), default='adam')
p.add_argument('--intra', type=int, default=0, help="TensorFlow's intra-op threads per worker (0: TF's default)")
p.add_argument('--inter', type=int, default=0, help="TensorFlow's inter-op threads per worker (0: TF's default)")
args = p.parse_args()

import tensorflow as tf  # noqa: E402

if args.intra:
    tf.config.threading.set_intra_op_parallelism_threads(args.intra)
if args.inter:
    tf.config.threading.set_inter_op_parallelism_threads(args.inter)

if args.impl == 'mwms':
    impl = tf.distribute.experimental.CommunicationImplementation.RING
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=impl))
    workers = strategy.num_replicas_in_sync
    rank = json.loads(os.environ['TF_CONFIG'])['task']['index']
    scope = strategy.scope()
else:
    import hvd.tensorflow.keras as hvd
    hvd.init()
    workers, rank = hvd.size(), hvd.rank()
    import contextlib
    scope = contextlib.nullcontext()


def make_model():
    if args.model == 'cnn':  # the shape of Horovod's tensorflow2_keras_mnist example
        return tf.keras.Sequential([
            tf.keras.layers.Conv2D(32, [3, 3], activation='relu', input_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(64, [3, 3], activation='relu'),
            tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
            tf.keras.layers.Dropout(0.25),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation='relu'),
            tf.keras.layers.Dropout(0.5),
            tf.keras.layers.Dense(10, activation='softmax'),
        ])
    return tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28, 1)),
        tf.keras.layers.Dense(256, activation='relu'),
        tf.keras.layers.Dense(256, activation='relu'),
        tf.keras.layers.Dense(10, activation='softmax'),
    ])


def make_optimizer():
    lr = 0.001 * workers  # Horovod's example scales the rate by the workers
    if args.optimizer == 'adam':
        return tf.keras.optimizers.Adam(lr)
    if args.optimizer == 'legacy-adam':
        return tf.keras.optimizers.legacy.Adam(lr)
    return tf.keras.optimizers.SGD(lr)


def dataset(batch, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((batch, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, (batch,)).astype(np.int64)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


class StepTimes(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


tf.random.set_seed(1)
with scope:
    model = make_model()
    opt = make_optimizer()
    if args.impl == 'hvd':
        opt = hvd.DistributedOptimizer(opt)
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(), optimizer=opt)

callbacks = [StepTimes()]
if args.impl == 'hvd':
    callbacks.insert(0, hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    data = dataset(args.batch, rank)
else:
    def per_worker(ctx):
        assert ctx.get_per_replica_batch_size(args.batch * workers) == args.batch
        return dataset(args.batch, ctx.input_pipeline_id)
    data = strategy.distribute_datasets_from_function(per_worker)

total = args.warmup + args.steps
model.fit(data, steps_per_epoch=total, epochs=1, verbose=0, callbacks=callbacks)
ends = callbacks[-1].ends
assert len(ends) == total, (len(ends), total)
ms = [(b - a) * 1e3 for a, b in zip(ends[args.warmup - 1:], ends[args.warmup:])]
q = statistics.quantiles(ms, n=4)

traces = getattr(model.train_function, 'experimental_get_tracing_count', lambda: -1)()
checksum = float(sum(np.sum(w.astype(np.float64)) for w in model.get_weights()))
if args.impl == 'hvd':
    sums = hvd.allgather_object(checksum)
    assert all(s == sums[0] for s in sums), ('the workers\' weights differ', sums)
if rank == 0:
    print('keras_step %s %s %.2f %.2f %.2f %d   (np=%d batch=%d optimizer=%s threads=%d/%d traces=%d max_ms=%.1f '
          'checksum=%.6g)' % (args.impl, args.model, statistics.median(ms), q[0], q[2], len(ms), workers, args.batch,
                              args.optimizer, tf.config.threading.get_intra_op_parallelism_threads(),
                              tf.config.threading.get_inter_op_parallelism_threads(), traces, max(ms), checksum),
          flush=True)
if args.impl == 'hvd':
    hvd.shutdown()
sys.stdout.flush()
sys.stderr.flush()
# MultiWorkerMirroredStrategy's gRPC server may keep the process alive past
# the end of the script; every worker is done here.
os._exit(0)
