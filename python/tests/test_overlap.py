"""DistributedOptimizer(overlap_forward=model) (hvd's addition, issue 18):
step() defers each parameter's update to the forward pre-hook of its module.
Under hvdrun at np 2 and 3: training with it gives bit-for-bit the
parameters, losses and optimizer state of the plain DistributedOptimizer
(SGD with momentum and weight decay, Adam, an LR scheduler stepping between
step() and the deferred updates, set_to_none zero_grad, a branch some steps
do not use, groups), the flush points apply what is pending, and misuse is
refused."""
import copy

import pytest
import torch
import torch.nn.functional as F

import hvd.torch as hvd
from hvd.torch.elastic import TorchState

N, R = hvd.size(), hvd.rank()
_seq = [0]


class Net(torch.nn.Module):
    """Layers of mixed sizes and a branch used only on even steps."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4),
                                        torch.nn.ReLU(), torch.nn.Linear(4, 16))
        self.branch = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 3)
        self.use_branch = True

    def forward(self, x):
        h = self.body(x)
        if self.use_branch:
            h = torch.relu(self.branch(h))
        return self.head(h)


def pair(make_opt, **kw):
    """Two identical float64 models with their DistributedOptimizers, the
    second deferring its updates."""
    torch.manual_seed(0)
    a = Net().double()
    b = copy.deepcopy(a)
    _seq[0] += 1
    out = []
    for tag, m, extra in (('plain', a, {}), ('overlap', b, dict(overlap_forward=b))):
        names = [('ov%d.%s.%s' % (_seq[0], tag, n), p) for n, p in m.named_parameters()]
        out.append((m, hvd.DistributedOptimizer(make_opt(m), named_parameters=names, **kw, **extra)))
    return out


def batch(step):
    g = torch.Generator().manual_seed(100 * step + R)
    return torch.randn(6, 8, generator=g, dtype=torch.float64), torch.randint(0, 3, (6,), generator=g)


def train(m, o, steps, sched=None, set_to_none=False):
    losses = []
    for s in range(steps):
        m.use_branch = s % 2 == 0
        x, y = batch(s)
        o.zero_grad(set_to_none=set_to_none)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


def same(a, b):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n


OPTS = {
    'sgd': lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3),
    'adam': lambda m: torch.optim.Adam(m.parameters(), lr=0.01),
}


@pytest.mark.parametrize('opt', sorted(OPTS))
@pytest.mark.parametrize('kw', [dict(), dict(priorities='layer_order'), dict(groups=2)])
def test_same_training_as_plain(opt, kw):
    (a, oa), (b, ob) = pair(OPTS[opt], **kw)
    sa = torch.optim.lr_scheduler.StepLR(oa, step_size=2, gamma=0.5)
    sb = torch.optim.lr_scheduler.StepLR(ob, step_size=2, gamma=0.5)
    la = train(a, oa, 8, sa)
    lb = train(b, ob, 8, sb)
    assert la == lb  # every forward pass saw the updated parameters
    assert ob._pending  # the last step's updates wait for the next forward pass
    sda, sdb = oa.state_dict(), ob.state_dict()  # state_dict applies them
    assert not ob._pending
    same(a, b)
    for k, v in sda['state'].items():
        for name, t in v.items():
            assert torch.equal(torch.as_tensor(t), torch.as_tensor(sdb['state'][k][name])), (k, name)
    # and every rank holds the same parameters
    flat = torch.cat([p.detach().flatten() for p in b.parameters()]).view(1, -1)
    every = hvd.allgather(flat, name='ov.check.%d' % _seq[0])
    assert all(torch.equal(every[0], every[r]) for r in range(N))


def test_set_to_none_and_flush_points():
    (a, oa), (b, ob) = pair(OPTS['sgd'])
    train(a, oa, 3, set_to_none=True)
    train(b, ob, 3, set_to_none=True)
    oa.zero_grad(set_to_none=True)
    ob.zero_grad(set_to_none=True)
    # the pending parameters keep their gradients until applied, then lose them
    assert ob._pending and all(p.grad is not None for p in ob._pending)
    ob.state_dict()  # a flush point
    assert not ob._pending and all(p.grad is None for p in b.parameters())
    same(a, b)
    # synchronize() is one too (and then, as the plain optimizer's after
    # zero_grad, reduces zeros for the parameters without a gradient)
    train(a, oa, 1)
    train(b, ob, 1)
    ob.synchronize()
    oa.synchronize()
    assert not ob._pending
    same(a, b)


def test_forward_applies_each_module_before_it_runs():
    (a, oa), (b, ob) = pair(OPTS['sgd'])
    train(a, oa, 2)
    train(b, ob, 2)
    seen = {}
    for name, mod in b.named_modules():
        own = list(mod.parameters(recurse=False))
        if own:
            def hook(m, _, name=name, own=own):
                seen.setdefault(name, any(p in ob._pending for p in own))  # returns None: inputs unchanged
            mod.register_forward_pre_hook(hook)
    b.use_branch = True
    b(batch(99)[0])
    # the hooks registered after hvd's run after them: no module ran with a pending parameter
    assert seen and not any(seen.values()), seen
    oa.state_dict()
    same(a, b)


def test_elastic_state_saves_the_applied_model():
    (a, oa), (b, ob) = pair(OPTS['sgd'])
    train(a, oa, 2)
    train(b, ob, 2)
    state = TorchState(model=b, optimizer=ob, epoch=0)
    state.save()
    oa.state_dict()
    same(a, b)


def test_misuse_is_refused():
    m = Net().double()
    with pytest.raises(ValueError, match='torch.nn.Module'):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                 overlap_forward=[m])
    other = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match='owns none'):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                 overlap_forward=other)
    if N in (2, 4):
        with pytest.raises(ValueError, match='Adasum'):
            hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                     op=hvd.Adasum, overlap_forward=m)
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                 named_parameters=[('ov.misuse.' + n, p) for n, p in m.named_parameters()],
                                 overlap_forward=m)
    x, y = batch(0)
    F.cross_entropy(m(x), y).backward()
    with pytest.raises(ValueError, match='closure'):
        o.step(closure=lambda: 0.0)
    o.synchronize()
