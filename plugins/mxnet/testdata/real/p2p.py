"""hvd.mxnet against real MXNet under hvdrun -np 2 (the point-to-point
pairs need exactly 2 ranks): the collectives once over, in-place writes,
priority and dtype checks, a set of rank 0 only, isend/irecv/send/recv and
their errors."""
import numpy as np

import mxnet as mx
import hvd.mxnet as hvd


def nd(a):
    """An NDArray of a's dtype (mx.nd.array makes float32 of any numpy array)."""
    return mx.nd.array(a, dtype=a.dtype)


ps0 = hvd.ProcessSet([0])
hvd.init(process_sets=[ps0])
r, n = hvd.rank(), hvd.size()
base = np.arange(6, dtype=np.float32).reshape(2, 3)
x = nd(base + r)

avg = hvd.allreduce(x, name='avg')  # average=True is MXNet's default
assert np.allclose(avg.asnumpy(), base + (n - 1) / 2), avg.asnumpy()
s = hvd.allreduce(x, average=False, name='sum', priority=5)
assert np.allclose(s.asnumpy(), n * base + sum(range(n))), s.asnumpy()
assert np.allclose(x.asnumpy(), base + r), 'input modified'

y = nd(np.ones(4) * (r + 1))
out = hvd.allreduce_(y, op=hvd.Max, name='max')
assert out is y and np.all(y.asnumpy() == n), y.asnumpy()

gs = hvd.grouped_allreduce([nd(np.ones(2, np.float32)), nd(np.full(3, 2, np.int32))],
                           average=False, name='grp')
assert np.all(gs[0].asnumpy() == n) and np.all(gs[1].asnumpy() == 2 * n) and gs[1].dtype == np.int32

g = hvd.allgather(nd(np.full((r + 1, 2), r, dtype=np.int32)), name='ag', priority=-1)
assert g.shape == (n * (n + 1) // 2, 2) and g.dtype == np.int32, (g.shape, g.dtype)

b = nd(np.full(3, r, dtype=np.int64))
hvd.broadcast_(b, root_rank=n - 1, name='b')
assert np.all(b.asnumpy() == n - 1), b.asnumpy()
bb = hvd.broadcast(nd(np.full(3, r, np.float32)), 0, name='bb')
assert np.all(bb.asnumpy() == 0)

out, rs = hvd.alltoall(nd(np.arange(n, dtype=np.float32) + 10 * r), splits=[1] * n, name='a2a')
assert rs.asnumpy().tolist() == [1] * n, rs.asnumpy()
assert out.asnumpy().tolist() == [10 * k + r for k in range(n)], out.asnumpy()
even = hvd.alltoall(nd(np.full((n, 2), r, np.float64)), name='a2a.even')
assert even.asnumpy()[:, 0].tolist() == list(range(n))

rsc = hvd.reducescatter(nd(np.ones((2 * n, 2), np.float32)), op=hvd.Sum, name='rs')
assert rsc.shape == (2, 2) and np.all(rsc.asnumpy() == n), rsc.asnumpy()

for bad in ('high', 1.5, True):
    try:
        hvd.allreduce(x, priority=bad)
    except ValueError:
        pass
    else:
        raise SystemExit('priority %r accepted' % (bad,))
try:
    hvd.allreduce(np.ones(2))
except TypeError as e:
    assert 'NDArray' in str(e), e
else:
    raise SystemExit('a numpy array accepted')
flags = hvd.allreduce(nd(np.array([True, r == 0])), op=hvd.Max, name='bool')
assert flags.dtype == np.bool_ and flags.asnumpy().tolist() == [True, True], flags

# Process sets: the set {0}; rank 1 is not a member and gets ValueError.
if r == 0:
    only = hvd.allreduce(x, average=False, name='ps0', process_set=ps0)
    assert np.allclose(only.asnumpy(), x.asnumpy())
else:
    try:
        hvd.allreduce(x, name='ps0', process_set=ps0)
    except ValueError:
        pass
    else:
        raise SystemExit('allreduce on a set this rank is not in was accepted')

# Point-to-point (n == 2): both directions posted before any wait, then
# blocking; irecv writes the NDArray when synchronize returns it.
assert n == 2, 'the smoke test runs on 2 ranks'
peer = 1 - r
mine = nd(np.full((2, 3), 10.0 * r + 1, np.float32))
into = nd(np.zeros((2, 3), np.float32))
hs = hvd.isend(mine, peer, tag=3)
hr = hvd.irecv(into, peer, tag=3)
got = hvd.synchronize(hr)
assert got is into and np.all(into.asnumpy() == 10.0 * peer + 1), into.asnumpy()
assert hvd.synchronize(hs) is mine
if r == 0:
    assert hvd.send(nd(np.arange(4, dtype=np.int32)), 1, tag=5) is None
    back = nd(np.zeros(4, np.int32))
    assert hvd.recv(back, 1, tag=6) is back and back.asnumpy().tolist() == [0, 2, 4, 6], back.asnumpy()
else:
    v = nd(np.zeros(4, np.int32))
    assert hvd.recv(v, 0, tag=5) is v and v.asnumpy().tolist() == [0, 1, 2, 3], v.asnumpy()
    hvd.send(nd(v.asnumpy() * 2), 0, tag=6)
h = hvd.isend(nd(np.ones(1, np.float64)), peer, tag=7)
hr = hvd.irecv(nd(np.zeros(1, np.float64)), peer, tag=7)
while not hvd.poll(hr):
    pass
assert hvd.synchronize(hr).asnumpy().tolist() == [1.0] and hvd.synchronize(h) is not None
for bad, what in [(lambda: hvd.isend(x, r), 'this rank'), (lambda: hvd.irecv(x, peer, tag=1 << 32), 'tag'),
                  (lambda: hvd.recv(x, 0.5), 'global rank'), (lambda: hvd.send(x, 5), 'rank 5'),
                  (lambda: hvd.isend(x, 0 if r else 1, process_set=ps0), 'not a member')]:
    try:
        bad()
    except ValueError as e:
        assert what in str(e), e
    else:
        raise SystemExit('accepted: ' + what)
try:
    hvd.irecv(np.zeros(2), peer)
except TypeError:
    pass
else:
    raise SystemExit('irecv into a numpy array accepted')

print('rank %d: hvd.mxnet smoke ok' % r, flush=True)
hvd.shutdown()
