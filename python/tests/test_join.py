"""hvd.join() as Horovod users meet it (run under hvdrun -np 2/3/4 on shm
and tcp by e2e/python_test.go TestPythonJoin): uneven numbers of steps per
rank with DistributedOptimizer, then join; cached and fresh names; every
dtype Horovod's torch allreduce accepts; each rank joining first.

Before the response-cache fix every test here that reuses a name hung."""
import time

import pytest
import torch

import hvd.torch as hvd

R, N = hvd.rank(), hvd.size()

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.float32, torch.float64]


def _expected_sum(joined):
    return sum(r + 1 for r in range(N) if r != joined)


@pytest.mark.parametrize('first', range(N))
@pytest.mark.parametrize('cached', [True, False])
def test_join_every_dtype_fused(first, cached):
    """One tensor per dtype enqueued together (fused), the rank `first`
    joins after one step, the others run three more steps with the same
    names (cached) or fresh ones: the joined rank contributes zeros."""
    tag = 'j.%d.%s' % (first, cached)

    def step(s, joined):
        ts = [torch.full([3 + i], R + 1, dtype=dt) for i, dt in enumerate(DTYPES)]
        hs = [hvd.allreduce_async_(t, op=hvd.Sum,
                                   name='%s.%s%s' % (tag, dt, '' if cached else '.%d' % s))
              for t, dt in zip(ts, DTYPES)]
        for h in hs:
            hvd.synchronize(h)
        want = _expected_sum(joined)
        for t, dt in zip(ts, DTYPES):
            assert torch.equal(t, torch.full_like(t, want)), (dt, s, t)

    step(0, None)
    if R != first:
        for s in range(1, 4):
            step(s, first)
    last = hvd.join()
    lasts = hvd.allgather(torch.tensor([last]), name=tag + '.last')
    assert len(set(lasts.tolist())) == 1
    if N > 1:
        assert last != first


def _model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


@pytest.mark.parametrize('backward_passes', [1, 2])
def test_distributed_optimizer_uneven_steps_then_join(backward_passes):
    """Rank r trains 3 + r steps (uneven), then joins: the ranks that still
    train get gradients averaged with zeros from the joined ranks, and the
    job ends instead of hanging. Horovod's documented use of join."""
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=backward_passes)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(100 + R)
    for _ in range(3 + R):
        opt.zero_grad()
        for _ in range(backward_passes):
            x = torch.randn(4, 6, generator=g)
            model(x).pow(2).mean().backward()
        opt.step()
    last = hvd.join()
    assert last == N - 1, 'the rank with the most steps joins last'
    # Afterwards the job goes on normally: parameters can be re-synchronised.
    hvd.broadcast_parameters(model.state_dict(), root_rank=N - 1)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0), name='dopt.join.params.%d' % backward_passes)
    assert all(torch.equal(everyone[0], everyone[i]) for i in range(N))


def test_join_value_when_ranks_drop_out_one_by_one():
    """Ranks drop out in rank order; each remaining step's average counts
    the joined ranks as zeros but still divides by the full size."""
    steps = 2 + R
    for s in range(steps):
        t = torch.ones(5, dtype=torch.float64)
        out = hvd.allreduce(t, name='dropout.avg')  # Average, same name: cached
        active = sum(1 for r in range(N) if 2 + r > s)
        assert torch.allclose(out, torch.full([5], active / N, dtype=torch.float64)), (s, out)
    assert hvd.join() == N - 1


def _settles(handle, seconds=30):
    """Polls an async op until it completes or fails (True) or the deadline
    passes (False: the ranks are waiting on different tensors)."""
    deadline = time.monotonic() + seconds
    while not hvd.poll(handle):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_unnamed_ops_after_join_errors_stay_in_step():
    """Horovod's test_horovod_join_allgather: each rank in turn joins first
    while the others call an unnamed allgather, which fails on each of them
    (allgather is not supported with Join); the joined rank never called it.
    At np 3 its automatic-name counter fell one behind, the next round's
    unnamed allgathers carried different names on the two active ranks
    (allgather.noname.1 / .2) and the job hung. A completed join restarts
    the automatic names on every rank, so they stay in step."""
    t = torch.ones(2, 3)
    for first in range(N):
        if R == first:
            last = hvd.join()
        else:
            h = hvd.allgather_async(t)
            assert _settles(h), ('rank %d: the unnamed allgather while rank %d has joined neither '
                                 'completed nor failed: automatic names out of step' % (R, first))
            with pytest.raises(RuntimeError, match='not supported with Join'):
                hvd.synchronize(h)
            last = hvd.join()
        assert last != first
    h = hvd.allgather_async(torch.tensor([R]))
    assert _settles(h), 'automatic names out of step after the joins'
    assert hvd.synchronize(h).tolist() == list(range(N))


def test_unnamed_ops_after_uneven_steps_and_join_stay_in_step():
    """Rank r runs 1 + r unnamed allreduces (the joined ranks contribute
    zeros), then joins: the ranks have used different numbers of automatic
    names, yet the unnamed ops after the join match across ranks."""
    for s in range(1 + R):
        out = hvd.allreduce(torch.ones(4), op=hvd.Sum)
        assert torch.equal(out, torch.full([4], float(sum(1 for r in range(N) if 1 + r > s)))), (s, out)
    assert hvd.join() == N - 1
    for want in (torch.arange(N), torch.arange(N) * 2):
        h = hvd.allgather_async((want[R:R + 1]).clone())
        assert _settles(h), 'rank %d: unnamed allgather after the join did not match across ranks' % R
        assert torch.equal(hvd.synchronize(h), want)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_join_average_is_the_division(dtype):
    """Horovod's test_horovod_join_allreduce compares the Average with a
    joined rank against (N-1)·x/N with no tolerance. At np 3 a float32
    Average scaled by float32(1/3) was an ulp off (142/3: 47.333336 instead
    of 47.333332); it must be the division itself, on every rank."""
    x = torch.tensor([75, 71, -94, 65, 16, 142, -188, 1], dtype=dtype)
    for first in range(N):
        if R == first:
            assert hvd.join() != first
        else:
            out = hvd.allreduce(x, name='join.avg.%s.%d' % (dtype, first))
            assert torch.equal(out, x * (N - 1) / N), (out, x * (N - 1) / N)
            assert hvd.join() != first
