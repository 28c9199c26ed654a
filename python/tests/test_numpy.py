"""hvd.numpy under hvdrun with 2 or 3 processes (HVD_TEST_FRAMEWORK=numpy, so
that conftest initializes through hvd.numpy and torch is never imported):
every collective against a local reference, in-place/async/grouped
variants, zero copy, process sets, errors and object helpers."""
import itertools
import os
import sys

import numpy as np
import pytest

import hvd.numpy as hvd
from conftest import EVEN, ODD

N = hvd.size()
R = hvd.rank()

DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64, np.float16, np.float32, np.float64]
DIMS = [1, 2, 3]
OPS = {'sum': hvd.Sum, 'avg': hvd.Average, 'min': hvd.Min, 'max': hvd.Max, 'prod': hvd.Product}


def rank_array(r, dtype, dim, seed=0, lo=-10, hi=10):
    """The array rank r contributes (every rank can compute every rank's)."""
    g = np.random.default_rng(1000 * seed + 17 * r + dim)
    if np.dtype(dtype).kind == 'u':
        lo = 0
    return g.integers(lo, hi, size=[4] * dim).astype(dtype)


def test_torch_not_imported():
    assert os.environ.get('HVD_TEST_FRAMEWORK') == 'numpy', 'run with HVD_TEST_FRAMEWORK=numpy (see e2e)'
    assert 'torch' not in sys.modules


def test_topology():
    assert hvd.is_initialized()
    assert N == int(os.environ['HOROVOD_SIZE']) and R == int(os.environ['HOROVOD_RANK'])
    assert hvd.local_size() == N and hvd.local_rank() == R
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0 and hvd.is_homogeneous() is True
    assert hvd.global_process_set.ranks == list(range(N))
    assert hvd.mpi_built() is False and hvd.nccl_built() == 0


# --------------------------------------------------------------- allreduce

@pytest.mark.parametrize('dtype,dim,op', itertools.product(DTYPES, DIMS, OPS))
def test_allreduce_ops(dtype, dim, op):
    lo, hi = (-2, 3) if op == 'prod' else (-10, 10)
    ins = [rank_array(r, dtype, dim, lo=lo, hi=hi) for r in range(N)]
    if np.dtype(dtype).itemsize == 1 and op in ('sum', 'avg'):
        ins = [a // 4 for a in ins]  # no wrap-around in 8 bits
    x = ins[R].copy()
    out = hvd.allreduce(x, op=OPS[op], name='np.ar.%s.%s.%d' % (op, np.dtype(dtype).name, dim))
    stack = np.stack([a.astype(np.float64) for a in ins])
    want = {'sum': stack.sum(0), 'avg': stack.sum(0) / N, 'min': stack.min(0), 'max': stack.max(0),
            'prod': stack.prod(0)}[op]
    if op == 'avg' and np.dtype(dtype).kind in 'iu':
        want = np.trunc(want)
    assert out.dtype == np.dtype(dtype) and out.shape == x.shape
    assert out is not x and not np.shares_memory(out, x)
    assert np.array_equal(x, ins[R]), 'the input must not change'
    tol = 1e-2 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(out.astype(np.float64), want, atol=tol * max(1.0, np.abs(want).max()))


def test_allreduce_bool():
    x = np.array([R == 0, True, False])
    assert hvd.allreduce(x, op=hvd.Max).tolist() == [True, True, False]
    assert hvd.allreduce(x, op=hvd.Min).tolist() == [N == 1, True, False]
    with pytest.raises(ValueError):
        hvd.allreduce(x)  # Average of bool


def test_allreduce_prescale_postscale_and_average_flag():
    x = np.full(4, float(R + 1))
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    np.testing.assert_allclose(out, np.full(4, float(sum(range(1, N + 1)))))
    with pytest.warns(DeprecationWarning):
        assert np.allclose(hvd.allreduce(x, average=False), sum(range(1, N + 1)))
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_allreduce_inplace_is_zero_copy():
    x = np.full((3, 2), float(R + 1), dtype=np.float32)
    addr = x.ctypes.data
    y = hvd.allreduce_(x, op=hvd.Sum, name='np.inplace')
    assert y is x and x.ctypes.data == addr
    assert np.array_equal(x, np.full((3, 2), float(sum(range(1, N + 1))), dtype=np.float32))
    h = hvd.allreduce_async_(x, op=hvd.Average, name='np.inplace.async')
    assert hvd.synchronize(h) is x
    h = hvd.allreduce_async(np.ones(5, dtype=np.int32), op=hvd.Sum, name='np.async')
    while not hvd.poll(h):
        pass
    assert hvd.synchronize(h).tolist() == [N] * 5


def test_zero_copy_path():
    a = np.ones((4, 3), dtype=np.float32)
    assert hvd._contig(a) is a  # handed to the engine by address
    view = a[:, 1]
    c = hvd._contig(view)
    assert c is not view and c.flags.c_contiguous and np.array_equal(c, view)
    h = hvd.allreduce_async(a, op=hvd.Sum, name='np.zero.copy')
    kept = hvd._handle_map[h][0]
    assert any(k is a for k in kept), 'the input stays referenced until synchronize'
    hvd.synchronize(h)
    assert h not in hvd._handle_map


def test_allreduce_noncontiguous_and_arraylike():
    base = np.arange(12, dtype=np.float64).reshape(3, 4) * (R + 1)
    view = base[:, ::2]  # not contiguous
    assert not view.flags.c_contiguous
    scale = sum(range(1, N + 1))
    out = hvd.allreduce(view, op=hvd.Sum)
    assert np.array_equal(out, np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2] * scale)
    hvd.allreduce_(view, op=hvd.Sum, name='np.noncontig.inplace')
    assert np.array_equal(base[:, ::2], np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2] * scale)
    assert np.array_equal(base[:, 1::2], np.arange(12, dtype=np.float64).reshape(3, 4)[:, 1::2] * (R + 1))
    assert hvd.allreduce([1.0, 2.0], op=hvd.Sum).tolist() == [float(N), 2.0 * N]
    assert hvd.allreduce(np.float32(R), op=hvd.Max).shape == ()


def test_allreduce_fp16_compression():
    x = np.full(5, 0.5 * (R + 1), dtype=np.float32)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, 0.5 * sum(range(1, N + 1)), rtol=1e-3)
    i = hvd.allreduce(np.ones(2, dtype=np.int32), op=hvd.Sum, compression=hvd.Compression.fp16)
    assert i.dtype == np.int32 and i.tolist() == [N, N]


def test_grouped_allreduce():
    xs = [np.full(3, float(R)), np.arange(4, dtype=np.int64) * R, np.ones((2, 2), dtype=np.float32)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name='np.grouped')
    s = sum(range(N))
    assert np.array_equal(outs[0], np.full(3, float(s))) and np.array_equal(outs[1], np.arange(4) * s)
    assert np.array_equal(outs[2], np.full((2, 2), N, dtype=np.float32))
    assert np.array_equal(xs[0], np.full(3, float(R))), 'inputs unchanged'
    same = hvd.grouped_allreduce_(xs, op=hvd.Sum)
    assert all(a is b for a, b in zip(same, xs)) and np.array_equal(xs[0], np.full(3, float(s)))
    h = hvd.grouped_allreduce_async([np.ones(2)], op=hvd.Sum)
    assert np.array_equal(hvd.synchronize(h)[0], np.full(2, float(N)))
    with pytest.raises(ValueError):
        hvd.grouped_allreduce([])


def test_many_async_ops_fused():
    hs = [hvd.allreduce_async(np.full(16, float(i + R)), op=hvd.Sum, name='np.many.%d' % i) for i in range(64)]
    for i, h in enumerate(hs):
        assert np.array_equal(hvd.synchronize(h), np.full(16, float(N * i + sum(range(N)))))


def test_zero_size():
    out = hvd.allreduce(np.zeros((0, 3), dtype=np.float32), op=hvd.Sum)
    assert out.shape == (0, 3)


# --------------------------------------------------------------- allgather

@pytest.mark.parametrize('dtype,dim', itertools.product(DTYPES + [np.bool_], DIMS))
def test_allgather_variable_rows(dtype, dim):
    ins = [np.resize(rank_array(r, dtype, dim), [r + 1] + [4] * (dim - 1)) for r in range(N)]
    out = hvd.allgather(ins[R], name='np.ag.%s.%d' % (np.dtype(dtype).name, dim))
    assert out.dtype == np.dtype(dtype)
    assert np.array_equal(out, np.concatenate(ins))


def test_allgather_grouped_and_errors():
    outs = hvd.grouped_allgather([np.full((1, 2), R), np.full(R + 1, float(R))])
    assert outs[0][:, 0].tolist() == list(range(N))
    assert outs[1].tolist() == [float(r) for r in range(N) for _ in range(r + 1)]
    h = hvd.allgather_async(np.array([R], dtype=np.int32), name='np.ag.async')
    assert hvd.synchronize(h).tolist() == list(range(N))
    with pytest.raises(ValueError):
        hvd.allgather(np.array(1.0))  # 0-dim
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allgather(np.ones((1, 2 if R == 0 else 3)), name='np.ag.mismatch')


# ---------------------------------------------------------------- broadcast

@pytest.mark.parametrize('dtype,root', itertools.product([np.int32, np.float16, np.float64, np.bool_], range(3)))
def test_broadcast(dtype, root):
    root = root % N
    x = (np.arange(6).reshape(2, 3) * (R + 1)).astype(dtype)
    out = hvd.broadcast(x, root, name='np.bc.%s.%d' % (np.dtype(dtype).name, root))
    assert np.array_equal(out, (np.arange(6).reshape(2, 3) * (root + 1)).astype(dtype))
    assert np.array_equal(x, (np.arange(6).reshape(2, 3) * (R + 1)).astype(dtype)), 'input unchanged'
    y = hvd.broadcast_(x, root)
    assert y is x and np.array_equal(x, out)


def test_broadcast_async_and_errors():
    h = hvd.broadcast_async_(np.full(3, R), 0, name='np.bc.async')
    assert hvd.synchronize(h).tolist() == [0, 0, 0]
    with pytest.raises(ValueError):
        hvd.broadcast(np.ones(1), N)  # root out of range
    with pytest.raises(ValueError):
        hvd.broadcast(np.ones(1), 0.5)
    with pytest.raises(hvd.HorovodInternalError):
        hvd.broadcast(np.ones(1), R, name='np.bc.root.mismatch')  # every rank a different root
    ro = np.ones(2)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        hvd.broadcast_(ro, 0)
    with pytest.raises(TypeError):
        hvd.broadcast_([1.0], 0)


# ----------------------------------------------------------------- alltoall

def test_alltoall_even_and_splits():
    x = np.stack([np.full(2, float(R * 10 + j)) for j in range(N)])
    out = hvd.alltoall(x)
    assert np.array_equal(out, np.stack([np.full(2, float(r * 10 + R)) for r in range(N)]))
    splits = [R + 1] * N  # rank r sends r+1 rows to everyone
    x = np.full((sum(splits), 1), float(R))
    out, received = hvd.alltoall(x, splits=splits)
    assert received.dtype == np.int32 and received.tolist() == [r + 1 for r in range(N)]
    assert out[:, 0].tolist() == [float(r) for r in range(N) for _ in range(r + 1)]
    out2, rec2 = hvd.alltoall(x, splits=np.array(splits, dtype=np.int64))
    assert np.array_equal(out2, out) and np.array_equal(rec2, received)
    o3, r3 = hvd.synchronize(hvd.alltoall_async(x, splits=splits, name='np.a2a.async'))
    assert np.array_equal(o3, out) and np.array_equal(r3, received)


def test_alltoall_bad_splits():
    x = np.ones((N, 1))
    for bad in ([1] * (N + 1), [2] * N, np.ones((1, N), dtype=np.int32), np.ones(N), [1.5] * N):
        with pytest.raises(ValueError):
            hvd.alltoall(x, splits=bad)
    with pytest.raises(ValueError):
        hvd.alltoall(np.ones((N + 1, 1)))  # not divisible


# ------------------------------------------------------------ reducescatter

@pytest.mark.parametrize('rows,op', itertools.product([1, 5, 7], ['sum', 'avg']))
def test_reducescatter(rows, op):
    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (R + 1)
    out = hvd.reducescatter(x, op=OPS[op])
    total = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * sum(range(1, N + 1))
    if op == 'avg':
        total = total / N
    counts = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    off = sum(counts[:R])
    np.testing.assert_allclose(out, total[off:off + counts[R]], rtol=1e-6)


def test_reducescatter_grouped_async_errors():
    outs = hvd.grouped_reducescatter([np.ones((N, 2)), np.ones(2 * N, dtype=np.int32)], op=hvd.Sum)
    assert np.array_equal(outs[0], np.full((1, 2), float(N))) and outs[1].tolist() == [N, N]
    h = hvd.reducescatter_async(np.ones(N), name='np.rs.async', op=hvd.Sum)
    assert hvd.synchronize(h).tolist() == [float(N)]
    out = hvd.reducescatter(np.ones(N, dtype=np.float64), op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == np.float64 and out.tolist() == [float(N)]
    with pytest.raises(ValueError):
        hvd.reducescatter(np.ones(N), op=hvd.Min)
    with pytest.raises(ValueError):
        hvd.reducescatter(np.array(1.0))
    with pytest.raises(NotImplementedError):
        hvd.reducescatter(np.ones(N), op=hvd.Adasum)


# ------------------------------------------------------------ process sets

@pytest.mark.parametrize('which', ['even', 'odd'])
def test_process_sets(which):
    ps = EVEN if which == 'even' else ODD
    if not ps.included():
        for f in (lambda: hvd.allreduce(np.ones(1), process_set=ps),
                  lambda: hvd.allgather(np.ones(1), process_set=ps),
                  lambda: hvd.broadcast(np.ones(1), ps.ranks[0], process_set=ps),
                  lambda: hvd.alltoall(np.ones(len(ps.ranks)), process_set=ps),
                  lambda: hvd.reducescatter(np.ones(len(ps.ranks)), process_set=ps),
                  lambda: hvd.grouped_allreduce([np.ones(1)], process_set=ps),
                  lambda: hvd.barrier(process_set=ps)):
            with pytest.raises(ValueError):
                f()
        return
    n = len(ps.ranks)
    assert np.array_equal(hvd.allreduce(np.full(3, float(R + 1)), op=hvd.Sum, process_set=ps),
                          np.full(3, float(sum(r + 1 for r in ps.ranks))))
    assert hvd.allgather(np.full((1, 2), float(R)), process_set=ps)[:, 0].tolist() == [float(r) for r in ps.ranks]
    root = ps.ranks[-1]
    assert hvd.broadcast(np.full(2, float(R)), root, process_set=ps).tolist() == [float(root)] * 2
    assert hvd.alltoall(np.full(n, float(R)), process_set=ps).tolist() == [float(r) for r in ps.ranks]
    assert np.array_equal(hvd.reducescatter(np.ones((n, 2)), op=hvd.Sum, process_set=ps), np.full((1, 2), float(n)))
    hvd.barrier(process_set=ps)
    outsider = [r for r in range(N) if r not in ps.ranks]
    if outsider:
        with pytest.raises(ValueError):
            hvd.broadcast(np.ones(1), outsider[0], process_set=ps)


def test_unregistered_process_set():
    with pytest.raises(ValueError):
        hvd.allreduce(np.ones(1), process_set=hvd.ProcessSet([0]))


# ------------------------------------------------------------------ errors

def test_mismatches_fail_every_rank():
    h = hvd.allreduce_async(np.ones(3, dtype=np.float32 if R == 0 else np.int32), name='np.mismatch.type')
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.synchronize(h)
    assert 'rank' in str(e.value)
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(np.ones(2 + (R == 0)), name='np.mismatch.shape')
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(np.ones(2), op=hvd.Sum if R == 0 else hvd.Max, name='np.mismatch.op')


def test_unsupported_things():
    with pytest.raises(ValueError):
        hvd.allreduce(np.ones(2, dtype=np.complex64))
    with pytest.raises(ValueError, match='byte order'):
        hvd.allreduce(np.ones(2, dtype='>f4' if sys.byteorder == 'little' else '<f4'))
    with pytest.raises(ValueError):
        hvd.allreduce(np.ones(2), op=42)
    with pytest.raises(TypeError):
        hvd.allreduce('not an array')
    with pytest.raises(TypeError):
        hvd.allreduce_([1.0, 2.0])
    ro = np.ones(2)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match='read-only'):
        hvd.allreduce_(ro)
    assert hvd.allreduce(ro, op=hvd.Sum).tolist() == [float(N)] * 2  # reading a read-only array is fine


def test_unknown_handle():
    assert hvd.synchronize(123456789) is None
    with pytest.raises(ValueError):
        hvd.poll(123456789)


# ------------------------------------------------------------- join/barrier

def test_barrier_and_join():
    hvd.barrier()
    if R == 0:
        last = hvd.join()
    else:
        out = hvd.allreduce(np.ones(3), op=hvd.Average, name='np.join.ar')
        np.testing.assert_allclose(out, np.full(3, (N - 1) / N))  # rank 0 contributed zeros
        last = hvd.join()
    assert last in (range(1, N) if N > 1 else [0])
    lasts = hvd.allgather(np.array([last]))
    assert len(set(lasts.tolist())) == 1, 'join must return the same rank everywhere'


# ---------------------------------------------------------- object helpers

def test_broadcast_object_allgather_object():
    obj = {'rank': R, 'data': list(range(R + 3))} if R == N - 1 else None
    assert hvd.broadcast_object(obj, root_rank=N - 1, name='np.objtest') == {'rank': N - 1, 'data': list(range(N + 2))}
    assert hvd.broadcast_object(R) == 0
    assert hvd.allgather_object({'r': R, 's': 'x' * R}) == [{'r': r, 's': 'x' * r} for r in range(N)]


# ---------------------------------------------------------- point-to-point
# (hvd.torch's test_p2p.py covers tag and size mismatches, which break a
# set's point-to-point connections for good; this suite runs with static
# process sets and has none to spare.)

RIGHT, LEFT = (R + 1) % N, (R - 1) % N


def p2p_pattern(frm, to, k, shape, dtype=np.float64):
    g = np.random.default_rng(1000 * frm + 10 * to + k)
    return g.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize('dtype', [np.float32, np.float64, np.int32, np.float16, np.bool_, np.uint8])
def test_p2p_chain_blocking(dtype):
    """Rank r receives from r-1, then sends to r+1: the message walks the
    chain (the order that is safe with rendezvous sends)."""
    shape = (3, 5)
    want = p2p_pattern(0, 0, 1, shape, dtype)
    if R > 0:
        buf = np.zeros(shape, dtype=dtype)
        got = hvd.recv(buf, R - 1, tag=7)
        assert got is buf and np.array_equal(buf, want)
    if R < N - 1:
        assert hvd.send(want, R + 1, tag=7) is None
        assert np.array_equal(want, p2p_pattern(0, 0, 1, shape, dtype)), 'send must not modify its input'


def test_p2p_neighbours_both_directions_async():
    """Every rank sends 4 MiB to both neighbours and receives from both,
    everything posted before any wait (a pipeline stage in 1F1B): posted
    ops progress independently, so this cannot deadlock."""
    shape = (512, 1024)  # float64: 4 MiB
    peers = sorted({RIGHT, LEFT})
    outs = {(p, k): p2p_pattern(R, p, k, shape) for k in range(2) for p in peers}
    sends = [(outs[p, k], hvd.isend(outs[p, k], p, tag=k)) for k in range(2) for p in peers]
    bufs = {(p, k): np.empty(shape) for k in range(2) for p in peers}
    recvs = [(p, k, hvd.irecv(bufs[p, k], p, tag=k)) for k in range(2) for p in peers]
    for p, k, h in recvs:
        out = hvd.synchronize(h)
        assert out is bufs[p, k]
        assert np.array_equal(out, p2p_pattern(p, R, k, shape)), (p, k)
    for arr, h in sends:
        assert hvd.synchronize(h) is arr
    assert not any(h in hvd._handle_map for _, h in sends)


def test_p2p_noncontiguous_poll_and_arraylike():
    """A non-contiguous send goes through a contiguous copy; an irecv into a
    non-contiguous view fills exactly that view; poll turns true; send takes
    array-likes as the collectives do, ranks and tags numpy integers."""
    if N == 1:
        return
    if R == 0:
        src = np.arange(12, dtype=np.float32).reshape(3, 4)
        h = hvd.isend(src, 1, tag=0)
        kept, buf = hvd._handle_map[h][0]
        assert kept is src and buf is src, 'a contiguous array is sent from its own memory'
        hvd.synchronize(h)
        h = hvd.isend(src.T, 1, tag=1)
        kept, buf = hvd._handle_map[h][0]
        assert buf is not kept and buf.flags.c_contiguous, 'a non-contiguous array goes through a copy'
        hvd.synchronize(h)
        hvd.send([1, 2, 3], np.int64(1), tag=np.uint32(2))  # array-like: int64
    elif R == 1:
        first = np.zeros((3, 4), dtype=np.float32)
        assert hvd.recv(first, 0, tag=0) is first and first.ravel().tolist() == list(range(12))
        base = np.zeros((4, 6), dtype=np.float32)
        view = base[:, ::2]  # 4x3, not contiguous
        h = hvd.irecv(view, 0, tag=1)
        while not hvd.poll(h):
            pass
        assert hvd.synchronize(h) is view
        assert np.array_equal(view, np.arange(12, dtype=np.float32).reshape(3, 4).T)
        assert np.array_equal(base[:, 1::2], np.zeros((4, 3), dtype=np.float32))
        got = hvd.recv(np.zeros(3, dtype=np.int64), 0, tag=2)
        assert got.tolist() == [1, 2, 3]
    hvd.barrier()


def test_p2p_process_set_excluding_a_rank():
    """EVEN excludes rank 1: with 3 ranks, 0 and 2 exchange over it and rank
    1 is refused; with 2, EVEN is {0} and there is no one to talk to."""
    if R in EVEN.ranks:
        others = [r for r in EVEN.ranks if r != R]
        if others and R == EVEN.ranks[0]:
            hvd.send(np.full(4, 3.0), others[-1], tag=2, process_set=EVEN)
            assert hvd.recv(np.zeros(4), others[-1], tag=3, process_set=EVEN).tolist() == [4.0] * 4
        elif others:
            assert hvd.recv(np.zeros(4), EVEN.ranks[0], tag=2, process_set=EVEN).tolist() == [3.0] * 4
            hvd.synchronize(hvd.isend(np.full(4, 4.0), EVEN.ranks[0], tag=3, process_set=EVEN))
        with pytest.raises(ValueError, match='not a member'):
            hvd.isend(np.ones(1), 1, process_set=EVEN)  # the destination is outside the set
        with pytest.raises(ValueError, match='this rank'):
            hvd.irecv(np.ones(1), R, process_set=EVEN)
    else:
        for f in (lambda: hvd.isend(np.ones(1), 0, process_set=EVEN),
                  lambda: hvd.irecv(np.ones(1), 0, process_set=EVEN),
                  lambda: hvd.send(np.ones(1), 0, process_set=EVEN),
                  lambda: hvd.recv(np.ones(1), 0, process_set=EVEN)):
            with pytest.raises(ValueError, match='not a member'):
                f()
    with pytest.raises(ValueError):
        hvd.isend(np.ones(1), RIGHT, process_set=hvd.ProcessSet([0, 1]))  # never registered
    hvd.barrier()


def test_p2p_argument_errors():
    with pytest.raises(ValueError, match='this rank'):
        hvd.isend(np.ones(1), R)
    with pytest.raises(ValueError, match='this rank'):
        hvd.recv(np.ones(1), R)
    with pytest.raises(ValueError, match='rank %d' % (N + 3)):
        hvd.irecv(np.ones(1), N + 3)
    with pytest.raises(ValueError, match='rank -1'):
        hvd.send(np.ones(1), -1)
    for bad in (-1, 1 << 32, 1.0, True, '0'):
        with pytest.raises(ValueError, match='tag'):
            hvd.isend(np.ones(1), RIGHT, tag=bad)
    for bad in ('1', 1.0, True, None):
        with pytest.raises(ValueError, match='global rank'):
            hvd.isend(np.ones(1), bad)
        with pytest.raises(ValueError, match='global rank'):
            hvd.recv(np.ones(1), bad)
    with pytest.raises(TypeError):
        hvd.irecv([1.0], RIGHT)  # receives write in place: an ndarray
    with pytest.raises(TypeError):
        hvd.recv([1.0], RIGHT)
    ro = np.ones(2)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match='read-only'):
        hvd.irecv(ro, RIGHT)
    with pytest.raises(ValueError):
        hvd.isend(np.ones(2, dtype=np.complex64), RIGHT)
    with pytest.raises(ValueError):
        hvd.isend(np.ones(1), RIGHT, process_set=None)


# ------------------------------------------------- shutdown (runs last)

def test_adasum():
    """op=hvd.Adasum on arrays (test_adasum.py has Horovod's cases through
    hvd.torch): orthogonal vectors sum, parallel ones average, per tensor in
    a group; Horovod's NotImplementedError at sizes that are not powers of
    two and on other process sets than the global one."""
    if N & (N - 1):
        with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
            hvd.allreduce(np.ones(2), op=hvd.Adasum)
        with pytest.raises(NotImplementedError, match='non-power of 2 ranks'):
            hvd.grouped_allreduce([np.ones(2)], op=hvd.Adasum)
        return
    orth = np.zeros(N)
    orth[R] = R + 1
    assert np.allclose(hvd.allreduce(orth, op=hvd.Adasum), np.arange(1, N + 1))
    par = np.array([1., -2., 3.], dtype=np.float32) * (R + 1)
    out = hvd.allreduce_(par, op=hvd.Adasum)
    assert out is par and np.allclose(par, np.array([1., -2., 3.]) * (N + 1) / 2)
    half = np.ones(4, dtype=np.float16) * (R + 1)
    a, b = hvd.grouped_allreduce([orth, half], op=hvd.Adasum)
    assert np.allclose(a, np.arange(1, N + 1)) and b.dtype == np.float16 and np.allclose(b, (N + 1) / 2)
    with pytest.raises(ValueError, match='Adasum supports float16, bfloat16, float32 and float64'):
        hvd.allreduce(np.ones(2, dtype=np.int32), op=hvd.Adasum)
    if N > 1:
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.allreduce(np.ones(2), op=hvd.Adasum, process_set=EVEN)


def test_horovod_private_helpers():
    """hvd.mpi_ops._basics as in Horovod's framework modules."""
    want = {0: list(range(N))}
    for s in (EVEN, ODD):
        if s.process_set_id is not None:
            want[s.process_set_id] = s.ranks
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == want
    assert hvd.mpi_ops._basics._process_set_rank(0) == R
    assert hvd.mpi_ops.allreduce is hvd.allreduce


def test_shutdown_last():
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    # In Python's words (the library's message names Go's Init otherwise).
    for call in (lambda: hvd.allreduce(np.ones(1)), hvd.barrier, hvd.join,
                 lambda: hvd.allgather(np.ones(1)), lambda: hvd.add_process_set([0])):
        with pytest.raises(ValueError, match=r'not been initialized: call hvd\.init\(\) first') as e:
            call()
        assert 'Init first' not in str(e.value) and 'SDK' not in str(e.value)
    with pytest.raises(ValueError, match='not been initialized'):
        hvd.size()
    hvd.shutdown()  # again: a no-op

