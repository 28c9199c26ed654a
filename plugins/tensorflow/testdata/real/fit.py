"""hvd.tensorflow.keras (and hvd.keras) against real TensorFlow under
hvdrun -np 2 and -np 3: a model.fit run with DistributedOptimizer and the
callbacks whose weights end identical on every rank and whose loss falls,
the learning-rate callbacks against Horovod's formulas, MetricAverageCallback,
load_model, and dynamic process sets (init(process_sets='dynamic'))."""
import os
import tempfile

import numpy as np
import tensorflow as tf

import hvd.keras as hvd_keras
import hvd.tensorflow.keras as hvd

hvd.init(process_sets='dynamic')
R, N = hvd.rank(), hvd.size()
assert hvd_keras.DistributedOptimizer is hvd.DistributedOptimizer
assert hvd_keras.callbacks.MetricAverageCallback is hvd.callbacks.MetricAverageCallback

# ---------------------------------------------------------------- model.fit
tf.random.set_seed(1234 + R)  # different initial weights per rank: the broadcast must fix that
rng = np.random.default_rng(R)  # and a different shard of data per rank
true_w = np.array([[2.0], [-3.0], [0.5], [1.0]], np.float32)
xs = rng.normal(size=(256, 4)).astype(np.float32)
ys = xs @ true_w + 0.1 + 0.01 * rng.normal(size=(256, 1)).astype(np.float32)

model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation='tanh', input_shape=(4,)),
                             tf.keras.layers.Dense(1)])
base_lr = 0.02
opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=base_lr * N))
assert type(opt).__name__ == 'Adam' and getattr(type(opt), '_hvd_distributed')
model.compile(optimizer=opt, loss='mse', metrics=['mae'])


class Record(tf.keras.callbacks.Callback):
    """Records the learning rate every batch and the logs every epoch."""

    def __init__(self):
        super().__init__()
        self.lrs, self.logs = [], []

    def on_batch_begin(self, batch, logs=None):
        self.lrs.append(float(tf.keras.backend.get_value(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs))


rec = Record()
steps = 8
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
             hvd.callbacks.MetricAverageCallback(),
             hvd.callbacks.LearningRateWarmupCallback(initial_lr=base_lr * N, warmup_epochs=2, verbose=1),
             rec]
hist = model.fit(xs, ys, batch_size=32, epochs=4, steps_per_epoch=steps, callbacks=callbacks, verbose=0)
losses = hist.history['loss']
assert losses[-1] < 0.5 * losses[0], losses

# every rank ends with the same weights (bitwise) and the same averaged metrics
flat = np.concatenate([w.numpy().ravel() for w in model.weights])
gathered = hvd.allgather(flat[None, :])
assert all(np.array_equal(gathered[0], gathered[k]) for k in range(N)), 'weights differ across ranks'
opt_flat = np.concatenate([v.numpy().ravel() for v in model.optimizer.variables if v.dtype == tf.float32])
og = hvd.allgather(opt_flat[None, :])
assert all(np.array_equal(og[0], og[k]) for k in range(N)), 'optimizer slots differ across ranks'
mets = hvd.allgather(np.array([[rec.logs[-1]['loss'], rec.logs[-1]['mae']]]))
assert all(np.array_equal(mets[0], mets[k]) for k in range(N)), mets

# warmup: Horovod's multiplier 1/N * (e * (N-1) / warmup + 1), e = epoch + (batch+1)/steps
for i, lr in enumerate(rec.lrs[:2 * steps]):
    e = i // steps + (i % steps) / steps + 1.0 / steps
    want = base_lr * N / N * (e * (N - 1) / 2 + 1)
    assert abs(lr - want) < 1e-6, (i, lr, want)
assert all(abs(lr - base_lr * N) < 1e-6 for lr in rec.lrs[2 * steps:]), rec.lrs  # after warmup: untouched
assert abs(rec.logs[-1]['lr'] - base_lr * N) < 1e-6

# ------------------------------------------ LearningRateScheduleCallback
m2 = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
m2.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0)), loss='mse')
rec2 = Record()
sched = [hvd.callbacks.LearningRateScheduleCallback(initial_lr=1.0, multiplier=0.5, start_epoch=1, end_epoch=2),
         hvd.callbacks.LearningRateScheduleCallback(initial_lr=1.0, multiplier=lambda e: 0.1 ** e, start_epoch=2,
                                                    staircase=True),
         rec2]
m2.fit(xs, ys, batch_size=64, epochs=4, steps_per_epoch=2, callbacks=sched, verbose=0)
want = [1.0, 1.0, 0.5, 0.5, 0.01, 0.01, 0.001, 0.001]
assert np.allclose(rec2.lrs, want), rec2.lrs

# ------------------------------------- a legacy Keras optimizer, the same way
legacy = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(learning_rate=1.0))
lw_var = tf.Variable(np.zeros(3, np.float32))
legacy.apply_gradients([(tf.constant(np.full(3, R + 1.0, np.float32)), lw_var)])
assert np.allclose(lw_var.numpy(), -sum(k + 1.0 for k in range(N)) / N), lw_var.numpy()

# ------------------------------------------- MetricAverageCallback alone
cb = hvd.callbacks.MetricAverageCallback()
logs = {'loss': float(R), 'acc': 2.0 * R}
cb.on_epoch_end(0, logs)
assert abs(logs['loss'] - (N - 1) / 2) < 1e-9 and abs(logs['acc'] - (N - 1)) < 1e-9, logs

# ------------------------------------------------------------- load_model
path = os.path.join(tempfile.mkdtemp(prefix='hvd-keras-'), 'model.h5')
if R == 0:
    model.save(path)
hvd.allreduce(np.zeros(1), name='saved')  # wait for rank 0's file
paths = hvd.broadcast_object(path, root_rank=0)
loaded = hvd.load_model(paths)
assert getattr(type(loaded.optimizer), '_hvd_distributed', False), type(loaded.optimizer)
assert type(loaded.optimizer).__name__ == 'Adam'
lw = np.concatenate([w.numpy().ravel() for w in loaded.weights])
assert np.allclose(lw, hvd.broadcast(flat, 0, name='saved.weights'))
loaded.fit(xs, ys, batch_size=32, epochs=1, steps_per_epoch=2, verbose=0)  # trains, gradients reduced
lg = hvd.allgather(np.concatenate([w.numpy().ravel() for w in loaded.weights])[None, :])
assert all(np.array_equal(lg[0], lg[k]) for k in range(N))

# ------------------------------------------- dynamic process sets (eager)
import hvd.tensorflow as hvd_tf  # noqa: E402

pair = hvd_tf.add_process_set([0, N - 1] if N > 2 else [0])
assert pair.process_set_id >= 1 and pair.ranks == sorted({0, N - 1} if N > 2 else {0})
if pair.included():
    s = hvd_tf.allreduce(tf.constant([1.0]), op=hvd_tf.Sum, process_set=pair, name='dyn.sum')
    assert s.numpy().tolist() == [float(pair.size())]
else:
    try:
        hvd_tf.allreduce(tf.constant([1.0]), process_set=pair)
    except (ValueError, hvd_tf.HorovodInternalError) as e:
        assert 'rank %d' % R in str(e) and 'not a member' in str(e), e
    else:
        raise AssertionError('a rank outside the dynamic set ran its allreduce')
hvd_tf.remove_process_set(pair)
try:
    hvd_tf.allreduce(tf.constant([1.0]), process_set=pair)
except (ValueError, hvd_tf.HorovodInternalError):
    pass
else:
    raise AssertionError('allreduce on a removed set')

if N == 2:  # point-to-point and IndexedSlices, in these processes
    import runpy  # noqa: E402
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'p2p.py'), run_name='p2p')

hvd.shutdown()
print('hvd.tensorflow.keras ok')
