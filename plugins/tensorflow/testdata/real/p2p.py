"""hvd.tensorflow point-to-point and sparse allreduce against real
TensorFlow at np 2 (the p2p pairs need exactly 2 ranks): isend, irecv,
send, recv into templates and tf.Variables, poll, their errors, and
IndexedSlices through allreduce and DistributedGradientTape(sparse_as_dense).
fit.py runs it at np 2 in its own processes (TensorFlow's start-up is the
cost); it also runs alone under hvdrun -np 2."""
import numpy as np

import tensorflow as tf
import hvd.tensorflow as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
x = tf.convert_to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3) + r)

sparse = tf.IndexedSlices(tf.convert_to_tensor(np.full((1, 2), r + 1.0, np.float32)),
                          tf.convert_to_tensor(np.array([r], np.int64)), dense_shape=(n, 2))
red = hvd.allreduce(sparse, name='sparse')
assert isinstance(red, tf.IndexedSlices) and red.indices.numpy().tolist() == list(range(n))
assert np.allclose(red.values.numpy()[:, 0], [(k + 1) / n for k in range(n)]), red.values.numpy()

w = tf.Variable(np.zeros((n, 2), np.float32))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.gather(w, [r]) * (r + 1.0))
tape = hvd.DistributedGradientTape(tape, op=hvd.Sum, sparse_as_dense=True)
grads = tape.gradient(loss, [w])
assert isinstance(grads[0], tf.Tensor) and grads[0].shape == (n, 2), grads[0]
assert np.allclose(grads[0].numpy()[:, 0], [k + 1.0 for k in range(n)])

# Point-to-point (n == 2): both directions posted before any wait, then
# blocking, into a template tensor and into a tf.Variable.
assert n == 2, 'the smoke test runs on 2 ranks'
peer = 1 - r
mine = tf.convert_to_tensor(np.full((2, 3), 10.0 * r + 1, np.float32))
hs = hvd.isend(mine, peer, tag=3)
hr = hvd.irecv(tf.zeros((2, 3), dtype=tf.float32), peer, tag=3)
hv = hvd.irecv(tf.Variable(np.zeros(2, np.float64), name='recv:0'), peer, tag=4)
hvd.synchronize(hvd.isend(tf.convert_to_tensor(np.array([r, -r], np.float64)), peer, tag=4))
got = hvd.synchronize(hr)
assert isinstance(got, tf.Tensor) and got.dtype == tf.float32 and got.shape == (2, 3), got
assert np.all(got.numpy() == 10.0 * peer + 1), got.numpy()
var = hvd.synchronize(hv)
assert isinstance(var, tf.Variable) and var.numpy().tolist() == [peer, -peer], var.numpy()
assert hvd.synchronize(hs) is mine
if r == 0:
    assert hvd.send(tf.convert_to_tensor(np.arange(4, dtype=np.int64)), 1, tag=5) is None
    back = hvd.recv(tf.zeros((4,), dtype=tf.int64), 1, tag=6)
    assert isinstance(back, tf.Tensor) and back.dtype == tf.int64 and back.numpy().tolist() == [0, 2, 4, 6], back
else:
    v = tf.Variable(np.zeros(4, np.int64), name='p2p:0')
    assert hvd.recv(v, 0, tag=5) is v and v.numpy().tolist() == [0, 1, 2, 3], v.numpy()
    hvd.send(v.read_value() * 2, 0, tag=6)
h = hvd.isend(tf.convert_to_tensor(np.ones(1, np.float32)), peer, tag=7)
hr = hvd.irecv(tf.zeros((1,), dtype=tf.float32), peer, tag=7)
while not hvd.poll(hr):
    pass
assert hvd.synchronize(hr).numpy().tolist() == [1.0] and hvd.synchronize(h) is not None
for bad, what in [(lambda: hvd.isend(x, r), 'this rank'), (lambda: hvd.irecv(x, peer, tag=-1), 'tag'),
                  (lambda: hvd.recv(x, 'peer'), 'global rank'), (lambda: hvd.send(x, 5), 'rank 5'),
                  (lambda: hvd.isend(tf.convert_to_tensor(np.ones(2, np.complex64)), peer), 'complex64')]:
    try:
        bad()
    except ValueError as e:
        assert what in str(e), e
    else:
        raise SystemExit('accepted: ' + what)
eager = tf.executing_eagerly
tf.executing_eagerly = lambda: False  # as inside tf.function
try:
    hvd.isend(x, peer)
except RuntimeError as e:
    assert 'eager' in str(e), e
else:
    raise SystemExit('isend accepted in graph mode')
finally:
    tf.executing_eagerly = eager

for bad, what in [(lambda: hvd.allreduce(tf.convert_to_tensor(np.ones(2, np.complex64))), 'complex64'),
                  (lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Max), 'op'),
                  (lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, gradient_predivide_factor=2.0),
                   'gradient_predivide_factor')]:
    try:
        bad()
    except ValueError as e:
        assert what in str(e), e
    else:
        raise SystemExit('accepted: ' + what)

print('rank %d: hvd.tensorflow p2p ok' % r, flush=True)
if __name__ == '__main__':
    hvd.shutdown()
