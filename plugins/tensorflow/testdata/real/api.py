"""hvd.tensorflow against real TensorFlow, under hvdrun -np 2 and -np 3:
every collective against expected values, eager and inside tf.function,
gradients, a static process set that excludes a rank, errors, zero copy,
DistributedGradientTape and DistributedOptimizer. One process per rank runs
everything (TensorFlow's import takes seconds); the first failed check
fails the rank (hvdrun then stops the others)."""
import os

import numpy as np
import tensorflow as tf

import hvd.tensorflow as hvd

SIZE = int(os.environ['HOROVOD_SIZE'])
FIRST = hvd.ProcessSet(range(SIZE - 1))  # every rank but the last
hvd.init(process_sets=[FIRST])
R, N = hvd.rank(), hvd.size()
assert N == SIZE and FIRST.process_set_id == 1 and FIRST.included() == (R < N - 1)
assert hvd.local_rank() == R and hvd.local_size() == N and hvd.is_initialized()


def close(a, b):
    a = a.numpy() if hasattr(a, 'numpy') else np.asarray(a)
    return a.shape == np.shape(b) and np.allclose(a, b)


def raises(exc, fn, what):
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError('%s: no %s' % (what, exc))


# ------------------------------------------------------------ queries, ops
assert int(hvd.size_op()) == N and int(hvd.rank_op()) == R and int(hvd.local_size_op()) == N
assert int(hvd.local_rank_op()) == R
assert int(hvd.process_set_included_op(FIRST.process_set_id)) == (R < N - 1)


@tf.function
def graph_queries():
    return hvd.size_op(), hvd.rank_op(), hvd.size_op(process_set_id=FIRST.process_set_id)


s_op, r_op, fs_op = graph_queries()
assert int(s_op) == N and int(r_op) == R and int(fs_op) == N - 1

# --------------------------------------------------------------- allreduce
base = np.arange(12, dtype=np.float32).reshape(3, 4)
x = tf.constant(base + R)
tot = sum(range(N))
assert close(hvd.allreduce(x, name='avg'), base + tot / N)
assert close(hvd.allreduce(x, op=hvd.Sum, name='sum'), N * base + tot)
assert close(hvd.allreduce(x, op=hvd.Min, name='min'), base)
assert close(hvd.allreduce(x, op=hvd.Max, name='max'), base + N - 1)
assert close(hvd.allreduce(tf.constant([R + 2.0]), op=hvd.Product, name='prod'), [np.prod([k + 2.0 for k in range(N)])])
assert close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, name='scale'), (N * base + tot) / 2)
h = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name='fp16')
assert h.dtype == tf.float32 and close(h, N * base + tot)
for dt in (tf.int32, tf.int64, tf.float64, tf.float16, tf.uint8, tf.int8):
    y = hvd.allreduce(tf.constant([1, 2, 3], dtype=dt), op=hvd.Sum, name='dtype.' + dt.name)
    assert y.dtype == dt and y.numpy().tolist() == [N, 2 * N, 3 * N], (dt, y)
assert hvd.allreduce(tf.constant(5.0), op=hvd.Sum, name='scalar').numpy() == 5.0 * N
assert hvd.allreduce(tf.zeros([0, 3]), name='empty').shape == (0, 3)
g = hvd.grouped_allreduce([x, tf.constant([R], tf.int64)], op=hvd.Sum, name='grouped')
assert close(g[0], N * base + tot) and g[1].numpy().tolist() == [tot] and g[1].dtype == tf.int64

# zero copy: the input is read in place, the output is the engine's array
big = tf.ones([1 << 16])
out = hvd.allreduce(big, op=hvd.Sum, name='zerocopy')
arr = hvd._as_numpy(big)
assert not arr.flags.writeable and np.shares_memory(arr, np.asarray(memoryview(big)))
from hvd.common import dlpack  # noqa: E402
eng = dlpack.aligned_empty((8,), np.float32)
eng[:] = 3.0
t = hvd._to_tf(eng, tf.float32)
eng[0] = 7.0  # the tensor is the array's memory (DLPack), not a copy
assert t.numpy()[0] == 7.0 and out.numpy()[0] == N
assert np.asarray(memoryview(out)).ctypes.data % dlpack.ALIGN == 0  # an engine output: aligned, taken as is
odd = np.full(9, 3.0, np.float32)[1:]  # not 64-byte aligned: TensorFlow gets a copy
t = hvd._to_tf(odd, tf.float32)
odd[0] = 7.0
assert t.numpy()[0] == 3.0

# -------------------------------------------------- allreduce in tf.function


@tf.function
def graph_allreduce(v):
    a = hvd.allreduce(v, op=hvd.Sum, name='graph.sum')
    b = hvd.allgather(v, name='graph.ag')
    c = hvd.broadcast(v, root_rank=N - 1, name='graph.bc')
    return a, b, c


a, b, c = graph_allreduce(x)
assert close(a, N * base + tot) and b.shape == (3 * N, 4) and close(c, base + N - 1)
a, b, c = graph_allreduce(x)  # the traced function runs again
assert close(a, N * base + tot)

# unnamed collectives in a graph: named after their tensors (Horovod's HorovodAllreduce_<name>),
# so independent ones the executor may run in any order still match across ranks


@tf.function
def graph_unnamed(v, w):
    outs = [hvd.allreduce(v * float(k), op=hvd.Sum) for k in range(4)]
    return outs, hvd.allgather(w), hvd.broadcast(w, root_rank=0)


for _ in range(3):
    outs, ag, bc = graph_unnamed(x, tf.constant([float(R)]))
    assert all(close(o, (N * base + tot) * k) for k, o in enumerate(outs))
    assert close(ag, np.arange(N, dtype=np.float32)) and close(bc, [0.0])

# gradients through a collective inside tf.function (the custom gradient is traced too)
gv = tf.Variable(base + R)


@tf.function
def graph_grad():
    with tf.GradientTape() as tape:
        y = hvd.allreduce(gv, op=hvd.Sum, name='graph.grad')
        loss = tf.reduce_sum(y * (R + 1.0))
    return tape.gradient(loss, gv)


assert close(graph_grad(), np.full((3, 4), sum(k + 1.0 for k in range(N))))


@tf.function(jit_compile=True)
def xla_allreduce(v):
    return hvd.allreduce(v, name='xla')


# XLA cannot compile the op (a tf.py_function): a clear error, on every rank, before any communication
msg = raises(Exception, lambda: xla_allreduce(x), 'jit_compile')
assert 'EagerPyFunc' in msg or 'py_function' in msg.lower() or 'XLA' in msg, msg[:500]

# ---------------------------------------------------------------- gradients
w = tf.Variable(base + R)
with tf.GradientTape() as tape:
    y = hvd.allreduce(w, op=hvd.Sum, name='grad.sum')
    loss = tf.reduce_sum(y * (R + 1.0))
gw = tape.gradient(loss, w)
assert close(gw, np.full((3, 4), sum(k + 1.0 for k in range(N)))), gw  # Sum's gradient: the sum of dy
with tf.GradientTape() as tape:
    y = hvd.allreduce(w, op=hvd.Average, name='grad.avg')
    loss = tf.reduce_sum(y * (R + 1.0))
assert close(tape.gradient(loss, w), np.full((3, 4), sum(k + 1.0 for k in range(N)) / N))

rows = R + 1  # allgather: a different first dimension per rank
v = tf.Variable(np.full((rows, 2), R, np.float32))
with tf.GradientTape() as tape:
    gat = hvd.allgather(v, name='grad.ag')
    loss = tf.reduce_sum(gat * tf.cast(tf.range(gat.shape[0])[:, None] + 1, tf.float32) * (R + 1.0))
assert gat.shape == (N * (N + 1) // 2, 2)
assert gat.numpy()[:, 0].tolist() == [float(k) for k in range(N) for _ in range(k + 1)]
offset = R * (R + 1) // 2
mean_dy = sum(k + 1.0 for k in range(N)) / N
want = np.repeat((np.arange(offset, offset + rows) + 1.0)[:, None] * mean_dy, 2, axis=1)
assert close(tape.gradient(loss, v), want)

v = tf.Variable(np.full(4, R, np.float32))
with tf.GradientTape() as tape:
    bc = hvd.broadcast(v, root_rank=0, name='grad.bc')
    loss = tf.reduce_sum(bc * (R + 1.0))
assert close(bc, np.zeros(4))
assert close(tape.gradient(loss, v), np.full(4, mean_dy if R == 0 else 0.0))

v = tf.Variable(np.arange(2 * N, dtype=np.float32) + 100 * R)
with tf.GradientTape() as tape:
    a2a = hvd.alltoall(v, name='grad.a2a')
    loss = tf.reduce_sum(a2a * (tf.range(2 * N, dtype=tf.float32) + 1))
assert a2a.numpy().tolist() == [float(100 * k + 2 * R + j) for k in range(N) for j in range(2)]
# the gradient sends every row back to where it came from
assert close(tape.gradient(loss, v), np.array([2.0 * R + j + 1 for _ in range(N) for j in range(2)]))

v = tf.Variable(np.ones((2 * N, 3), np.float32) * (R + 1))
with tf.GradientTape() as tape:
    rs = hvd.reducescatter(v, op=hvd.Sum, name='grad.rs')
    loss = tf.reduce_sum(rs * (R + 1.0))
assert rs.shape == (2, 3) and close(rs, np.full((2, 3), sum(k + 1.0 for k in range(N))))
# Horovod's gradient of a Sum reducescatter: every rank's dy gathered, times the set's size
assert close(tape.gradient(loss, v), N * np.repeat(np.arange(1.0, N + 1), 2)[:, None] * np.ones((1, 3)))

# -------------------------------------------- alltoall, reducescatter, groups
sp = [k + 1 for k in range(N)]
send = tf.constant(np.full(sum(sp), R, np.int32))
got, rsplits = hvd.alltoall(send, splits=sp, name='a2a.splits')
assert rsplits.numpy().tolist() == [R + 1] * N and got.numpy().tolist() == [k for k in range(N) for _ in range(R + 1)]
rs = hvd.reducescatter(tf.ones([N + 1, 2]), op=hvd.Average, name='rs.uneven')
assert rs.shape == ((N + 1) // N + (1 if R < (N + 1) % N else 0), 2) and close(rs, np.ones(rs.shape))
gr = hvd.grouped_reducescatter([tf.ones([N, 1]), tf.ones([2 * N], tf.float64)], op=hvd.Sum, name='grs')
assert close(gr[0], np.full((1, 1), N)) and close(gr[1], np.full(2, N))
gg = hvd.grouped_allgather([tf.constant([R]), tf.constant([[1.0, 2.0]])], name='gag')
assert gg[0].numpy().tolist() == list(range(N)) and gg[1].shape == (N, 2)

# -------------------------------------------------------- variables, objects
va = tf.Variable(np.full(3, R, np.float32))
vb = tf.Variable(np.full((2, 2), R, np.int64))
hvd.broadcast_variables([va, vb], root_rank=N - 1)
assert close(va, np.full(3, N - 1)) and close(vb, np.full((2, 2), N - 1))
obj = hvd.broadcast_object({'rank': R, 'list': [R] * 3}, root_rank=1)
assert obj == {'rank': 1, 'list': [1, 1, 1]}
assert hvd.allgather_object(('r', R)) == [('r', k) for k in range(N)]
hvd.barrier()
assert hvd.join() in range(N)
msg = raises(RuntimeError, lambda: hvd.broadcast_global_variables(0), 'broadcast_global_variables')
assert 'broadcast_variables' in msg

# ------------------------------------------------------------- process sets
if FIRST.included():
    fs = hvd.allreduce(tf.constant([R + 1.0]), op=hvd.Sum, process_set=FIRST, name='first.sum')
    assert close(fs, [sum(k + 1.0 for k in range(N - 1))])
    assert hvd.allgather(tf.constant([R]), process_set=FIRST, name='first.ag').numpy().tolist() == list(range(N - 1))
    assert close(hvd.broadcast(tf.constant([float(R)]), 0, process_set=FIRST, name='first.bc'), [0.0])
    vg = tf.Variable([float(R + 1)])
    with tf.GradientTape() as tape:
        y = hvd.allreduce(vg, op=hvd.Sum, process_set=FIRST, name='first.grad')
    assert close(tape.gradient(y, vg), [N - 1.0])
    if N > 2:
        raises(ValueError, lambda: hvd.broadcast(tf.constant([1.0]), N - 1, process_set=FIRST), 'root outside the set')
else:
    msg = raises((ValueError, hvd.HorovodInternalError), lambda: hvd.allreduce(tf.constant([1.0]), process_set=FIRST),
                 'foreign set')
    assert 'rank %d' % R in msg and 'not a member' in msg, msg
raises((ValueError, hvd.HorovodInternalError), lambda: hvd.allreduce(tf.constant([1.0]), process_set=hvd.ProcessSet([0])),
       'unregistered set')

# ------------------------------------------------------------------- errors
raises(hvd.HorovodInternalError, lambda: hvd.allreduce(tf.ones([2 + (R == 0)]), name='err.shape'), 'shape mismatch')
raises(hvd.HorovodInternalError, lambda: hvd.allreduce(tf.ones([2], tf.float32 if R == 0 else tf.float64),
                                                       name='err.dtype'), 'dtype mismatch')
raises(hvd.HorovodInternalError, lambda: hvd.broadcast(tf.ones([2 + R]), 0, name='err.bshape'), 'broadcast shape')
raises(ValueError, lambda: hvd.allreduce(tf.constant(['a'])), 'string tensor')
raises(ValueError, lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Max), 'tape op')
# backward_passes_per_step > 1: Keras optimizers aggregate (parity.py); a TF1 optimizer refuses it
raises(NotImplementedError, lambda: hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                                             backward_passes_per_step=2), 'passes')
assert close(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name='after.errors'), [N])  # the engine still works

# ------------------------------------------------- DistributedGradientTape
w1 = tf.Variable(np.ones(3, np.float32))
w2 = tf.Variable(np.ones((2, 2), np.float32))
emb = tf.Variable(np.ones((5, 2), np.float32))
with tf.GradientTape() as tape:
    loss = (tf.reduce_sum(w1 * (R + 1.0)) + tf.reduce_sum(w2 * w2 * (R + 1.0))
            + tf.reduce_sum(tf.gather(emb, [R % 5]) * (R + 1.0)))
tape = hvd.DistributedGradientTape(tape)
g1, g2, ge = tape.gradient(loss, [w1, w2, emb])
assert close(g1, np.full(3, mean_dy)) and close(g2, np.full((2, 2), 2 * mean_dy))
assert isinstance(ge, tf.IndexedSlices)  # gathered, as Horovod does
dense = tf.convert_to_tensor(ge).numpy()
want = np.zeros((5, 2), np.float32)
for k in range(N):
    want[k % 5] += (k + 1.0) / N
assert np.allclose(dense, want), dense
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w1 * (R + 1.0)) + tf.reduce_sum(w2 * (R + 1.0))
tape = hvd.DistributedGradientTape(tape, op=hvd.Sum, num_groups=1, compression=hvd.Compression.fp16)
g1, g2 = tape.gradient(loss, [w1, w2])
assert close(g1, np.full(3, mean_dy * N)) and close(g2, np.full((2, 2), mean_dy * N))

# ----------------------------------------- DistributedOptimizer, tf.function
model_w = tf.Variable(np.zeros(4, np.float32))
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=1.0))


@tf.function
def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model_w * (R + 1.0))
    grads = tape.gradient(loss, [model_w])
    opt.apply_gradients(zip(grads, [model_w]))
    return loss


step()
step()
assert close(model_w, np.full(4, -2 * mean_dy)), model_w  # identical on every rank
v1 = tf.Variable(np.zeros(2, np.float32))
opt1 = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
gv = opt1.compute_gradients(lambda: tf.reduce_sum(v1 * (R + 1.0)), [v1])
opt1.apply_gradients(gv)
assert close(v1, np.full(2, -0.5 * mean_dy))
raises(TypeError, lambda: hvd.DistributedOptimizer(object()), 'not an optimizer')

hvd.shutdown()
print('hvd.tensorflow api ok')
