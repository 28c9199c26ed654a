"""Compression.measured() (hvd's addition, issue 18): a per-tensor
compression policy from measured sensitivity, through DistributedOptimizer,
under hvdrun at np 2 and 3."""
import pytest
import torch
import torch.nn.functional as F

import hvd.torch as hvd

N, R = hvd.size(), hvd.rank()


class TwoKinds(torch.nn.Module):
    """A layer fed one-hot inputs (its weight gradient lives in a few
    columns: its largest 1 % carries nearly all of it) and a layer fed dense
    inputs (its gradient is spread out: top-k 1 % would leave most behind)."""

    def __init__(self):
        super().__init__()
        self.sparse = torch.nn.Linear(4096, 64, bias=False)
        self.dense = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 1)

    def forward(self, onehot, dense):
        return self.out(torch.tanh(self.sparse(onehot) + self.dense(dense)))


def data(step):
    g = torch.Generator().manual_seed(1000 * step + R)
    idx = torch.randint(0, 4096, (8,), generator=g)
    onehot = torch.zeros(8, 4096)
    onehot[torch.arange(8), idx] = 1.0
    dense = torch.randn(8, 64, generator=g)
    return onehot, dense, torch.randn(8, 1, generator=g)


def train(comp, tag, steps, **kw):
    torch.manual_seed(0)
    m = TwoKinds()
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05),
                                 named_parameters=[('%s.%s' % (tag, n), p) for n, p in m.named_parameters()],
                                 compression=comp, **kw)
    losses = []
    for s in range(steps):
        a, b, y = data(s)
        o.zero_grad()
        loss = F.mse_loss(m(a, b), y)
        loss.backward()
        o.step()
        losses.append(hvd.allreduce(loss.detach().reshape(1), name='%s.loss' % tag).item())
    return m, losses


def test_decides_per_tensor_from_the_gradients():
    comp = hvd.Compression.measured(steps=3)
    m, losses = train(comp, 'ms.a', 3)
    d = comp.decisions
    assert d is not None and set(d) == {'ms.a.sparse.weight', 'ms.a.dense.weight', 'ms.a.dense.bias',
                                        'ms.a.out.weight', 'ms.a.out.bias'}, d
    assert getattr(d['ms.a.sparse.weight'], 'sparse', False), d  # one-hot inputs: top-k
    assert d['ms.a.dense.weight'] is hvd.Compression.bf16, d     # spread out: bf16
    # every rank decided alike (the errors were averaged over the set)
    every = hvd.allgather_object(sorted((n, repr(c)) for n, c in d.items()), name='ms.a.decisions')
    assert all(e == every[0] for e in every)
    # while measuring, the gradients went uncompressed: the same run as none
    _, plain = train(hvd.Compression.none, 'ms.b', 3)
    assert losses == plain


@pytest.mark.parametrize('bucket', [0, 25 << 20])
def test_measures_each_gradient_once_per_step(bucket):
    """The compressor of each gradient is chosen once per step, bucketed
    launches or not: a measuring policy sums one error per call, so a second
    call would double them (and halve its bounds)."""
    comp = hvd.Compression.measured(steps=5)
    calls = {}
    real = comp.select

    def counting(name, tensor):
        calls[name] = calls.get(name, 0) + 1
        return real(name, tensor)

    comp.select = counting
    train(comp, 'ms.once%d' % bucket, 2, bucket_bytes=bucket)
    assert len(calls) == 5 and set(calls.values()) == {2}, calls


def test_trains_near_uncompressed_and_bounds():
    _, plain = train(hvd.Compression.none, 'ms.c', 60)
    _, meas = train(hvd.Compression.measured(steps=4), 'ms.d', 60)
    assert meas[-1] < meas[0] and sum(meas[-10:]) <= 1.25 * sum(plain[-10:]) + 1e-6, (meas[-10:], plain[-10:])
    # a bound only exactness meets: uncompressed, but for the one-element
    # bias, which top-k sends whole
    strict = hvd.Compression.measured([(hvd.Compression.topk(0.01), 0.0)], steps=1)
    train(strict, 'ms.e', 2)
    d = strict.decisions
    assert getattr(d.pop('ms.e.out.bias'), 'sparse', False)
    assert d == {}, d  # absent: uncompressed
    assert strict.select('ms.e.dense.weight', torch.ones(3)) is hvd.Compression.none


def test_relative_error():
    t = torch.zeros(1000)
    t[:5] = 1.0
    comp = hvd.Compression.measured()
    assert comp.relative_error(hvd.Compression.topk(0.01), t) == 0.0   # 5 ≤ k = 10: nothing left behind
    t[5:] = 0.1
    left = (995 * 0.01 - 5 * 0.01) ** 0.5 / (5 + 995 * 0.01) ** 0.5  # the 990 small ones k=10 cannot keep
    assert abs(comp.relative_error(hvd.Compression.topk(0.01), t) - left) < 1e-6  # (0.1 in float32)
    assert 0 < comp.relative_error(hvd.Compression.bf16, torch.randn(100)) < 0.01
    assert comp.relative_error(hvd.Compression.none, torch.randn(100)) == 0.0


def test_misuse():
    with pytest.raises(ValueError, match='bound'):
        hvd.Compression.measured([(hvd.Compression.fp16, -1)])
    with pytest.raises(ValueError, match='at least one'):
        hvd.Compression.measured(steps=0)
    with pytest.raises(NotImplementedError, match='DistributedOptimizer'):
        hvd.allreduce(torch.ones(3), compression=hvd.Compression.measured(), name='ms.direct')
    m = TwoKinds()
    with pytest.raises(ValueError, match='groups'):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), compression=hvd.Compression.measured(),
                                 groups=2)
