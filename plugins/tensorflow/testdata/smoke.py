"""hvd.tensorflow on a stand-in tensorflow (testdata/faketf, eager only),
under hvdrun -np 2: the generated glue through hvd.numpy and the engine,
checked on every rank, point-to-point included."""
import numpy as np

import tensorflow as tf
import hvd.tensorflow as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
base = np.arange(6, dtype=np.float32).reshape(2, 3)
x = tf.convert_to_tensor(base + r)
mean_r = sum(range(n)) / n

avg = hvd.allreduce(x, name='avg')
assert isinstance(avg, tf.Tensor) and np.allclose(avg.numpy(), base + mean_r), avg.numpy()
s = hvd.allreduce(x, op=hvd.Sum, name='sum')
assert np.allclose(s.numpy(), n * base + sum(range(n)))
h = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name='fp16')
assert h.dtype == tf.float32 and np.allclose(h.numpy(), n * base + sum(range(n)))
scaled = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name='scaled')
assert np.allclose(scaled.numpy(), s.numpy())

grp = hvd.grouped_allreduce([x, tf.convert_to_tensor(np.ones(3, np.int64))], op=hvd.Sum, name='grp')
assert np.allclose(grp[0].numpy(), s.numpy()) and grp[1].numpy().tolist() == [n] * 3 and grp[1].dtype == tf.int64

g = hvd.allgather(tf.convert_to_tensor(np.full((r + 1, 2), r, np.int32)), name='ag')
assert g.shape == (n * (n + 1) // 2, 2) and g.dtype == tf.int32
gg = hvd.grouped_allgather([tf.convert_to_tensor(np.full(1, r, np.int64)), x], name='gag')
assert gg[0].numpy().tolist() == list(range(n)) and gg[1].shape == (2 * n, 3)

b = hvd.broadcast(tf.convert_to_tensor(np.full(3, r, np.float64)), root_rank=n - 1, name='b')
assert np.all(b.numpy() == n - 1)

out, rs = hvd.alltoall(tf.convert_to_tensor(np.arange(n, dtype=np.float32) + 10 * r), splits=[1] * n, name='a2a')
assert rs.numpy().tolist() == [1] * n and out.numpy().tolist() == [10 * k + r for k in range(n)], (out.numpy(), rs.numpy())
even = hvd.alltoall(tf.convert_to_tensor(np.full((n, 2), r, np.float32)), name='a2a.even')
assert isinstance(even, tf.Tensor) and even.numpy()[:, 0].tolist() == list(range(n))

rsc = hvd.reducescatter(tf.convert_to_tensor(np.ones((2 * n, 2), np.float32)), op=hvd.Sum, name='rs')
assert rsc.shape == (2, 2) and np.all(rsc.numpy() == n)
grs = hvd.grouped_reducescatter([tf.convert_to_tensor(np.ones((n, 1), np.float64))], op=hvd.Average, name='grs')
assert grs[0].shape == (1, 1) and np.all(grs[0].numpy() == 1)

va = tf.Variable(np.full(2, r, np.float32), name='a:0')
vb = tf.Variable(np.full((1, 2), r, np.int64), name='b:0')
hvd.broadcast_variables([va, vb], root_rank=0)
assert np.all(va.numpy() == 0) and np.all(vb.numpy() == 0)

sparse = tf.IndexedSlices(tf.convert_to_tensor(np.full((1, 2), r + 1.0, np.float32)),
                          tf.convert_to_tensor(np.array([r], np.int64)), dense_shape=(n, 2))
red = hvd.allreduce(sparse, name='sparse')
assert isinstance(red, tf.IndexedSlices) and red.indices.numpy().tolist() == list(range(n))
assert np.allclose(red.values.numpy()[:, 0], [(k + 1) / n for k in range(n)]), red.values.numpy()

# DistributedGradientTape (the stand-in tape returns its target as the gradients).
g0 = tf.convert_to_tensor(np.full(2, r + 1.0, np.float32))
g2 = tf.convert_to_tensor(np.full(3, 2.0 * r, np.float64))
srcs = [tf.Variable(np.zeros(2, np.float32), name='w0:0'), tf.Variable(np.zeros(1), name='w1:0'),
        tf.Variable(np.zeros(3), name='w2:0')]
for kw in [{}, {'num_groups': 1}, {'gradient_predivide_factor': 2.0}, {'groups': [[srcs[0], srcs[2]]]}]:
    tape = hvd.DistributedGradientTape(tf.GradientTape(), **kw)
    grads = tape.gradient([g0, None, g2], srcs)
    assert grads[1] is None, kw
    assert np.allclose(grads[0].numpy(), np.mean([k + 1.0 for k in range(n)])), (kw, grads[0].numpy())
    assert np.allclose(grads[2].numpy(), np.mean([2.0 * k for k in range(n)])), (kw, grads[2].numpy())
tape = hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum, sparse_as_dense=True)
grads = tape.gradient([sparse], srcs[:1])
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

print('rank %d: hvd.tensorflow smoke ok' % r, flush=True)
hvd.shutdown()
