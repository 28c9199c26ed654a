"""op=hvd.Adasum in hvd.torch under hvdrun: at np 2 and 4 Horovod's expected
values (test/parallel/test_adasum_pytorch.py: orthogonal vectors sum,
parallel ones average, tiny and huge magnitudes stay stable;
test_adasum_tensorflow.py: the pairwise tree reference), fusion, grouped ops,
scaling, autograd and the delta DistributedOptimizer; at np 3 (and on a
process set other than the global one) Horovod's NotImplementedError.

Run: bin/hvdrun -np 2|4 python3 -m pytest python/tests/test_adasum.py, and
-np 3 with -k power_of_two."""
import copy
import math

import numpy as np
import pytest
import torch

import hvd.torch as hvd
from conftest import EVEN

N = hvd.size()
R = hvd.rank()
POW2 = N & (N - 1) == 0

pow2 = pytest.mark.skipif(not POW2, reason='Adasum needs a power-of-two number of ranks (see test_power_of_two_rule)')


# Horovod's helpers (test_adasum_pytorch.py, test_adasum_tensorflow.py).

def diff_ratio(true_vec, comp_vec):
    return np.linalg.norm(true_vec - comp_vec) / np.linalg.norm(true_vec) / 100.


def are_close(data_type, true_vec, comp_vec):
    return diff_ratio(true_vec, comp_vec) < np.finfo(data_type).eps


def adasum_reference_operation(a, b):
    anormsq = np.inner(a.ravel(), a.ravel())
    bnormsq = np.inner(b.ravel(), b.ravel())
    dot = np.dot(a.ravel(), b.ravel())
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq != 0 else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq != 0 else 1.0
    return acoeff * a + bcoeff * b


def reference_tree_reduction(tensors, size):
    """tensors[r] is rank r's list of arrays; pairs (0,1), (2,3), … first."""
    temp = copy.copy(tensors)
    for level in range(int(math.log(size, 2))):
        for i in range(size // 2 ** (level + 1)):
            temp[i] = [adasum_reference_operation(a, b) for a, b in zip(temp[2 * i], temp[2 * i + 1])]
    return temp[0]


DATA_TYPES = [np.float32, np.float16, np.float64]


@pow2
@pytest.mark.parametrize('data_type', DATA_TYPES)
def test_orthogonal(data_type):
    """Orthonormal columns of a QR factorization, one per rank: the sum."""
    np.random.seed(2)
    tensors, all_qs = [], []
    for n in [N * 20 - 17, N * 2 + 1, N + 2, 2 ** 19]:
        a = np.random.normal(0, 1, (n, N)).astype(np.float64)
        q, _ = np.linalg.qr(a)
        q = q.astype(data_type)
        all_qs.append(q.astype(np.float64))
        tensors.append(torch.from_numpy(np.ascontiguousarray(q[:, R])))
    handles = [hvd.allreduce_async(t, op=hvd.Adasum) for t in tensors]
    reduced = [hvd.synchronize(h) for h in handles]
    for q, rt in zip(all_qs, reduced):
        assert rt.dtype == tensors[0].dtype
        expected = np.sum(q, axis=1)  # / local_size only with NCCL
        assert are_close(data_type, expected, rt.numpy().astype(np.float64)), diff_ratio(expected, rt.numpy())


@pow2
@pytest.mark.parametrize('data_type', DATA_TYPES)
def test_parallel(data_type):
    """Multiples of one vector: the average."""
    np.random.seed(2)
    tensors, all_qs = [], []
    for n in [N * 20 - 13, N * 2 + 1, N + 2, 2 ** 19]:
        a = np.random.normal(0, 1, (n, 1)).astype(np.float64)
        r = np.random.normal(0, 1, (N, 1)).astype(np.float64)
        q = np.dot(a, r.T).astype(data_type)
        all_qs.append(q.astype(np.float64))
        tensors.append(torch.from_numpy(np.ascontiguousarray(q[:, R])))
    handles = [hvd.allreduce_async(t, op=hvd.Adasum) for t in tensors]
    reduced = [hvd.synchronize(h) for h in handles]
    for q, rt in zip(all_qs, reduced):
        expected = np.sum(q, axis=1) / N
        assert are_close(data_type, expected, rt.numpy().astype(np.float64)), diff_ratio(expected, rt.numpy())


@pow2
@pytest.mark.parametrize('data_type', [np.float32, np.float16])
def test_stability(data_type):
    """Parallel vectors of the dtype's tiniest normal magnitude."""
    np.random.seed(2)
    n = 1024
    a = np.random.normal(0, np.finfo(data_type).tiny, (n, 1)).astype(np.float64)
    r = np.random.normal(0, 1, (N, 1)).astype(np.float64)
    q = np.dot(a, r.T).astype(data_type).astype(np.float64)
    tensor = np.zeros(n, dtype=data_type)
    tensor[:] = q[:, R]
    tensor = torch.from_numpy(tensor)
    hvd.allreduce_(tensor, op=hvd.Adasum)
    expected = np.sum(q, axis=1) / N
    assert are_close(data_type, expected, tensor.numpy().astype(np.float64)), diff_ratio(expected, tensor.numpy())


@pow2
@pytest.mark.parametrize('data_type', [np.float32, np.float16])
def test_stability_2(data_type):
    """Parallel vectors whose magnitudes span tiny to sqrt(max) across ranks."""
    np.random.seed(2)
    n = 1024
    dt_min = np.finfo(data_type).tiny.astype(np.float64)
    dt_max = math.sqrt(np.finfo(data_type).max.astype(np.float64))
    a = np.random.normal(0, 1, (n, 1)).astype(np.float64)
    r = np.array([dt_max ** (float(i + 1) / float(N)) * dt_min ** (float(N - i - 1) / float(N))
                  for i in range(N)]).reshape(N, 1).astype(np.float64)
    np.random.shuffle(r)
    q = np.dot(a, r.T).astype(data_type).astype(np.float64)
    tensor = np.zeros(n, dtype=data_type)
    tensor[:] = q[:, R]
    tensor = torch.from_numpy(tensor)
    hvd.allreduce_(tensor, op=hvd.Adasum)
    expected = np.sum(q, axis=1) / N
    assert are_close(data_type, expected, tensor.numpy().astype(np.float64)), diff_ratio(expected, tensor.numpy())


@pow2
@pytest.mark.parametrize('dtype,tol', [(torch.float16, 1e-3), (torch.float32, 1e-6), (torch.float64, 1e-6)])
def test_multiple_allreduce_tree_reference(dtype, tol):
    """test_adasum_tensorflow.py's case: two random 2x2 tensors per rank
    against the pairwise tree, with its dtype tolerances."""
    rng = np.random.RandomState(5)
    rank_tensors = [[rng.random_sample((2, 2)), rng.random_sample((2, 2))] for _ in range(N)]
    answer = reference_tree_reduction(rank_tensors, N)
    reduced = [hvd.allreduce(torch.from_numpy(t).to(dtype), op=hvd.Adasum) for t in rank_tensors[R]]
    for want, got in zip(answer, reduced):
        assert got.dtype == dtype
        np.testing.assert_allclose(got.to(torch.float64).numpy(), want.astype(dtype_np(dtype)), rtol=tol, atol=tol)


def dtype_np(dtype):
    return {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}[dtype]


@pow2
def test_grouped_and_fused_keep_per_tensor_coefficients():
    """A parallel and an orthogonal tensor reduced together (grouped, and as
    async ops fused in one buffer) each get their own result."""
    par = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64) * (R + 1)
    orth = torch.zeros(N, dtype=torch.float64)
    orth[R] = R + 1.0
    want_par = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64) * (N + 1) / 2
    want_orth = torch.arange(1, N + 1, dtype=torch.float64)
    a, b = hvd.grouped_allreduce([par, orth], op=hvd.Adasum)
    assert torch.allclose(a, want_par) and torch.allclose(b, want_orth)
    h1 = hvd.allreduce_async(par, name='adasum.fused.par', op=hvd.Adasum)
    h2 = hvd.allreduce_async(orth, name='adasum.fused.orth', op=hvd.Adasum)
    assert torch.allclose(hvd.synchronize(h1), want_par) and torch.allclose(hvd.synchronize(h2), want_orth)
    ts = [par.clone(), orth.clone()]
    hvd.grouped_allreduce_(ts, op=hvd.Adasum)
    assert torch.allclose(ts[0], want_par) and torch.allclose(ts[1], want_orth)


@pow2
def test_prescale_postscale():
    """Scaled before and after, as Horovod's AdasumMPIAllreduceOp (Adasum is
    scale-equivariant, so the result is pre·post·Adasum)."""
    orth = torch.zeros(N, dtype=torch.float64)
    orth[R] = 1.0
    out = hvd.allreduce(orth, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25)
    assert torch.allclose(out, torch.full((N,), 0.5, dtype=torch.float64))


@pow2
def test_same_bits_on_every_rank():
    g = torch.Generator().manual_seed(R)
    t = torch.randn(1000, generator=g)
    out = hvd.allreduce(t, op=hvd.Adasum)
    gathered = hvd.allgather(out.view(1, -1))
    assert all(torch.equal(gathered[0], gathered[i]) for i in range(N))


@pow2
def test_autograd():
    """The gradient of an Adasum allreduce is the Adasum allreduce of the
    gradient (Horovod's HorovodAllreduce.backward)."""
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x * (R + 1), op=hvd.Adasum)
    assert torch.allclose(y, torch.full((3,), (N + 1) / 2, dtype=torch.float64))
    y.sum().backward()
    # d/dx of (R+1)·x through an allreduce of ones (parallel: average 1).
    assert torch.allclose(x.grad, torch.full((3,), R + 1.0, dtype=torch.float64))


def test_errors():
    if N > 1:
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=EVEN)
        with pytest.raises(NotImplementedError, match='non-global process sets'):
            hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1), op=hvd.Adasum,
                                     process_set=EVEN)
    with pytest.raises(NotImplementedError, match='Reducescatter does not support Adasum'):
        hvd.reducescatter(torch.ones(N), op=hvd.Adasum)
    if POW2:
        with pytest.raises(ValueError, match='Adasum supports float16, bfloat16, float32 and float64'):
            hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)


def test_power_of_two_rule():
    """Horovod's CPU Adasum needs a power-of-two number of ranks: at np 3
    every entry point raises its NotImplementedError at call time."""
    calls = [
        lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum, name='p2.a'),
        lambda: hvd.synchronize(hvd.allreduce_async_(torch.ones(2), op=hvd.Adasum, name='p2.b')),
        lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], op=hvd.Adasum, name='p2.c'),
        lambda: hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1),
                                         op=hvd.Adasum),
    ]
    for call in calls:
        if POW2:
            call()
        else:
            with pytest.raises(NotImplementedError, match='Running Adasum with non-power of 2 ranks is not supported'):
                call()
    if not POW2:
        # The library refuses too (UNSUPPORTED -> NotImplementedError), for
        # callers that do not go through hvd.torch's check.
        from hvd.common import _abi
        t = torch.ones(2)
        with pytest.raises(NotImplementedError, match='power-of-two number of ranks'):
            _abi.allreduce_async(t.data_ptr(), t.data_ptr(), _abi.DTYPE_FLOAT32, [2], _abi.REDUCE_OP_ADASUM, 1.0, 1.0,
                                 0, 'p2.abi')
    # Nothing was left half-enqueued: the job carries on.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='p2.after').item() == N


# ------------------------------------------------------- DistributedOptimizer

def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()


def data(r, step):
    g = torch.Generator().manual_seed(100 * step + r)
    return torch.randn(6, 3, generator=g).double(), torch.randn(6, 1, generator=g).double()


@pow2
@pytest.mark.parametrize('opt_name', ['sgd_momentum', 'adam'])
def test_distributed_optimizer_adasum(opt_name):
    """Horovod's delta optimizer: each rank steps its optimizer locally, the
    parameter changes are combined with Adasum and applied to the start
    values. Checked against every rank's optimizer simulated here (with its
    own state) and the tree reference, over three steps."""
    def new_opt(params):
        if opt_name == 'adam':
            return torch.optim.Adam(params, lr=0.05)
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)

    model = make_model()
    opt = hvd.DistributedOptimizer(new_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    shared = [p.detach().clone() for p in make_model().parameters()]
    sims = []
    for r in range(N):
        m = make_model()
        sims.append((m, new_opt(m.parameters())))
    for step in range(3):
        opt.zero_grad()
        x, y = data(R, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        deltas = []
        for r, (m, o) in enumerate(sims):
            with torch.no_grad():
                for p, s in zip(m.parameters(), shared):
                    p.copy_(s)
            o.zero_grad()
            x, y = data(r, step)
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
            deltas.append([(p.detach() - s).numpy() for p, s in zip(m.parameters(), shared)])
        combined = reference_tree_reduction(deltas, N)
        shared = [s + torch.from_numpy(d) for s, d in zip(shared, combined)]
        for p, s in zip(model.parameters(), shared):
            assert torch.allclose(p.detach(), s, rtol=1e-9, atol=1e-12), (step, p, s)
    flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.view(1, -1))
    assert all(torch.equal(gathered[0], gathered[i]) for i in range(N))


@pow2
def test_distributed_optimizer_adasum_rules():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
    with pytest.raises(AssertionError, match='Skipping synchronization is not supported'):
        with opt.skip_synchronize():
            pass
    # A parameter without a gradient on this step still takes part (its
    # delta is zero), and step() before backward works: every rank calls it.
    opt.step()
    x, y = data(R, 7)
    torch.nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError, match='zero_grad'):
        opt.zero_grad()
    opt.step()
    flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.view(1, -1))
    assert all(torch.equal(gathered[0], gathered[i]) for i in range(N))
