"""hvd.mxnet against real MXNet under hvdrun -np 2 and -np 3: every
collective against expected values, a static process set that excludes the
last rank, errors, zero copy, DistributedOptimizer, a Gluon training run
with DistributedTrainer whose weights end identical on every rank and whose
loss falls, then (re-initialized in dynamic mode) dynamic process sets. One
process per rank runs everything."""
import ctypes
import os

import mxnet as mx
import numpy as np

import hvd.mxnet as hvd

SIZE = int(os.environ['HOROVOD_SIZE'])
FIRST = hvd.ProcessSet(range(SIZE - 1))
hvd.init(process_sets=[FIRST])
R, N = hvd.rank(), hvd.size()
assert N == SIZE and FIRST.included() == (R < N - 1)
TOT = sum(range(N))
MEAN1 = sum(k + 1.0 for k in range(N)) / N


def nd(a, dtype=None):
    a = np.asarray(a)
    return mx.nd.array(a, dtype=dtype or a.dtype)


def eq(a, b):
    a = a.asnumpy()
    return a.shape == np.shape(b) and np.allclose(a, b)


def raises(exc, fn, what):
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError('%s: no %s' % (what, exc))


def address(t):
    p = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(t.handle, ctypes.byref(p)))
    return p.value


# -------------------------------------------------------------- collectives
base = np.arange(12, dtype=np.float32).reshape(3, 4)
x = nd(base + R)
assert eq(hvd.allreduce(x, name='avg'), base + TOT / N)
assert eq(hvd.allreduce(x, average=False, name='sum'), N * base + TOT)
assert eq(hvd.allreduce(x, op=hvd.Min, name='min'), base) and eq(hvd.allreduce(x, op=hvd.Max, name='max'), base + N - 1)
assert eq(hvd.allreduce(x, average=False, prescale_factor=2.0, postscale_factor=0.5, name='scaled'), N * base + TOT)
assert eq(x, base + R)  # the input is not modified
for dt in ('int32', 'int64', 'float64', 'float16', 'uint8', 'int8'):
    y = hvd.allreduce(nd([1, 2, 3], dt), average=False, name='dtype.' + dt)
    assert y.dtype == np.dtype(dt) and y.asnumpy().tolist() == [N, 2 * N, 3 * N], (dt, y)

# in place, into the NDArray's own memory, after MXNet's pending writes
y = mx.nd.ones((256,)) * (R + 1)  # an async op writes y; allreduce_ waits for it
before = address(y)
out = hvd.allreduce_(y, average=False, name='inplace')
assert out is y and address(y) == before and eq(y, np.full(256, N * MEAN1))
a = nd(np.ones(2, np.float32) * (R + 1))
b = nd(np.ones(3, np.int64) * (R + 1))
hvd.grouped_allreduce_([a, b], average=False, name='ginplace')
assert eq(a, np.full(2, N * MEAN1)) and eq(b, np.full(3, N * MEAN1)) and b.dtype == np.int64
g = hvd.grouped_allreduce([x, nd([R], 'int64')], average=False, name='grouped')
assert eq(g[0], N * base + TOT) and g[1].asnumpy().tolist() == [TOT]

# a slice is a view into its parent: reading and writing it in place
big = nd(np.zeros((4, 2), np.float32))
part = big[1:3]
part[:] = R + 1
hvd.allreduce_(part, average=False, name='slice')
assert eq(big, np.array([[0, 0], [N * MEAN1] * 2, [N * MEAN1] * 2, [0, 0]]))

gat = hvd.allgather(nd(np.full((R + 1, 2), R, np.int32)), name='ag')
assert gat.shape == (N * (N + 1) // 2, 2) and gat.asnumpy()[:, 0].tolist() == [k for k in range(N) for _ in range(k + 1)]
gg = hvd.grouped_allgather([nd([R]), nd([[1.0, 2.0]])], name='gag')
assert gg[0].asnumpy().tolist() == list(range(N)) and gg[1].shape == (N, 2)
bc = nd(np.full(3, R, np.int64))
hvd.broadcast_(bc, root_rank=N - 1, name='bc_')
assert bc.asnumpy().tolist() == [N - 1] * 3
assert eq(hvd.broadcast(nd(np.full(2, R, np.float32)), 0, name='bc'), [0, 0])
sp = [k + 1 for k in range(N)]
got, rs = hvd.alltoall(nd(np.full(sum(sp), R, np.int32)), splits=sp, name='a2a')
assert rs.asnumpy().tolist() == [R + 1] * N and got.asnumpy().tolist() == [k for k in range(N) for _ in range(R + 1)]
ev = hvd.alltoall(nd(np.arange(2 * N, dtype=np.float32) + 100 * R), name='a2a.even')
assert ev.asnumpy().tolist() == [float(100 * k + 2 * R + j) for k in range(N) for j in range(2)]
rsc = hvd.reducescatter(nd(np.ones((N + 1, 2), np.float32)), op=hvd.Sum, name='rs')
assert rsc.shape[0] == (N + 1) // N + (1 if R < (N + 1) % N else 0) and eq(rsc, np.full(rsc.shape, N))
assert hvd.broadcast_object({'r': R}, root_rank=N - 1) == {'r': N - 1}
assert hvd.allgather_object(R * 10) == [10 * k for k in range(N)]
hvd.barrier()
assert hvd.join() in range(N)

# ------------------------------------------------------------- process sets
if FIRST.included():
    assert eq(hvd.allreduce(nd([R + 1.0]), average=False, process_set=FIRST, name='first'),
              [sum(k + 1.0 for k in range(N - 1))])
    assert hvd.allgather(nd([R]), process_set=FIRST, name='first.ag').asnumpy().tolist() == list(range(N - 1))
    t = nd([float(R)])
    hvd.broadcast_(t, 0, process_set=FIRST, name='first.bc')
    assert t.asnumpy().tolist() == [0.0]
else:
    msg = raises((ValueError, hvd.HorovodInternalError), lambda: hvd.allreduce(nd([1.0]), process_set=FIRST),
                 'foreign set')
    assert 'rank %d' % R in msg and 'not a member' in msg, msg

# ------------------------------------------------------------------- errors
raises(hvd.HorovodInternalError, lambda: hvd.allreduce(mx.nd.ones((2 + (R == 0),)), name='err.shape'), 'shape')
raises(hvd.HorovodInternalError, lambda: hvd.allreduce(mx.nd.ones((2,), dtype='float32' if R == 0 else 'float64'),
                                                       name='err.dtype'), 'dtype')
raises(TypeError, lambda: hvd.allreduce([1.0, 2.0]), 'a list')
raises(ValueError, lambda: hvd.allreduce(x, priority='high'), 'priority')
assert eq(hvd.allreduce(nd([1.0]), average=False, name='after.errors'), [N])

# ------------------------------------------------------ DistributedOptimizer
opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=1.0))
w = mx.nd.zeros((2,))
opt.update(0, w, nd(np.full(2, R + 1, np.float32)), None)
assert eq(w, np.full(2, -MEAN1)), w

# ------------------------------------------------ Gluon: DistributedTrainer
mx.random.seed(100 + R)  # different initial weights per rank: broadcast_parameters fixes that
rng = np.random.default_rng(R)
true_w = np.array([[2.0, -3.0, 0.5, 1.0]], np.float32)
xs = rng.normal(size=(256, 4)).astype(np.float32)
ys = xs @ true_w.T + 0.1
net = mx.gluon.nn.HybridSequential()
net.add(mx.gluon.nn.Dense(8, activation='tanh'), mx.gluon.nn.Dense(1))
net.initialize(mx.init.Xavier())
net(mx.nd.array(xs[:1]))  # materialize the deferred parameters
params = net.collect_params()
hvd.broadcast_parameters(params, root_rank=0)
net.hybridize()
trainer = hvd.DistributedTrainer(params, 'adam', {'learning_rate': 0.02})
loss_fn = mx.gluon.loss.L2Loss()
losses = []
for step in range(40):
    lo = (step * 32) % 256
    data, label = mx.nd.array(xs[lo:lo + 32]), mx.nd.array(ys[lo:lo + 32])
    with mx.autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()
    trainer.step(32)
    losses.append(float(loss.mean().asscalar()))
assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
flat = np.concatenate([p.data().asnumpy().ravel() for _, p in sorted(params.items())])
allw = hvd.allgather(nd(flat[None, :]), name='weights').asnumpy()
assert all(np.array_equal(allw[0], allw[k]) for k in range(N)), 'weights differ across ranks'

# the trainer averages: one step of SGD(lr=1) on grad (R+1) moves by -mean
p = mx.gluon.Parameter('p', shape=(2,), init=mx.init.Zero())
p.initialize()
with mx.autograd.record():
    out = (p.data() * (R + 1.0)).sum()
out.backward()
tr = hvd.DistributedTrainer([p], mx.optimizer.SGD(learning_rate=1.0), compression=hvd.Compression.fp16)
tr.step(1)
assert eq(p.data(), np.full(2, -MEAN1)), p.data()
raises(ValueError, lambda: hvd.broadcast_parameters([1, 2]), 'a list of parameters')

# ------------------------- dynamic process sets, after a re-init in this process
hvd.shutdown()
hvd.init(process_sets='dynamic')
assert hvd.size() == N and hvd.rank() == R
pair = hvd.add_process_set([0, N - 1] if N > 2 else [0])
if pair.included():
    t = nd([1.0])
    hvd.allreduce_(t, average=False, process_set=pair, name='dyn')
    assert t.asnumpy().tolist() == [float(pair.size())]
else:
    msg = raises((ValueError, hvd.HorovodInternalError), lambda: hvd.allreduce(nd([1.0]), process_set=pair),
                 'outside a dynamic set')
    assert 'rank %d' % R in msg, msg
hvd.remove_process_set(pair)
raises((ValueError, hvd.HorovodInternalError), lambda: hvd.allreduce(nd([1.0]), process_set=pair), 'removed set')
assert eq(hvd.allreduce(nd([1.0]), average=False, name='after.dyn'), [N])

hvd.shutdown()
print('hvd.mxnet api ok')
