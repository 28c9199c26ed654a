"""hvd.SyncBatchNorm under hvdrun (np 2 and 3): each rank normalizes its
shard of a batch (shards of different sizes) and must get what
torch.nn.BatchNorm gives on the whole batch in one process — outputs, input
gradients, weight/bias gradients (summed over the ranks), running statistics
and eval-mode outputs — in float64 to 1e-10; also over a process set that
leaves a rank out."""
import pytest
import torch

import hvd.torch as hvd
from conftest import EVEN

N = hvd.size()
R = hvd.rank()
TOL = dict(rtol=1e-10, atol=1e-10)


def shard_sizes(ranks):
    # Uneven: 2, 3, 4, ... rows (rank 0 of np 3 with 2 rows, rank 2 with 4).
    return [2 + i for i in range(len(ranks))]


def full_batch(shape_tail, ranks, step):
    g = torch.Generator().manual_seed(1000 + step)
    rows = sum(shard_sizes(ranks))
    x = torch.randn([rows] + shape_tail, generator=g, dtype=torch.float64) * 3 + 1
    w = torch.randn([rows] + shape_tail, generator=g, dtype=torch.float64)  # loss weights
    return x, w


def my_rows(ranks):
    sizes = shard_sizes(ranks)
    i = ranks.index(R)
    start = sum(sizes[:i])
    return slice(start, start + sizes[i])


def make_pair(kind, c, process_set, **kw):
    ref = {'1d': torch.nn.BatchNorm1d, '2d': torch.nn.BatchNorm2d}[kind](c, **kw).double()
    sync = hvd.SyncBatchNorm(c, process_set=process_set, **kw).double()
    if ref.affine:
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            ref.weight.copy_(torch.rand(c, generator=g, dtype=torch.float64) + 0.5)
            ref.bias.copy_(torch.randn(c, generator=g, dtype=torch.float64))
            sync.weight.copy_(ref.weight)
            sync.bias.copy_(ref.bias)
    return ref, sync


CASES = [
    ('1d', [5], {}),
    ('1d', [4, 6], {}),
    ('2d', [3, 2, 3], {}),
    ('1d', [5], {'momentum': None}),
    ('1d', [5], {'affine': False}),
    ('2d', [2, 3, 2], {'momentum': 0.3, 'eps': 1e-3}),
]


def run(kind, tail, kw, process_set, ranks):
    c = tail[0]
    ref, sync = make_pair(kind, c, process_set, **kw)
    rows = my_rows(ranks)
    for step in range(3):
        x, w = full_batch(tail, ranks, step)
        xr = x.clone().requires_grad_(True)
        yr = ref(xr)
        (yr * w).sum().backward()
        xs = x[rows].clone().requires_grad_(True)
        ys = sync(xs)
        (ys * w[rows]).sum().backward()
        torch.testing.assert_close(ys, yr[rows].detach(), **TOL)
        torch.testing.assert_close(xs.grad, xr.grad[rows], **TOL)
        if ref.affine:
            gw = hvd.allreduce(sync.weight.grad, op=hvd.Sum, process_set=process_set, name='sbn.gw')
            gb = hvd.allreduce(sync.bias.grad, op=hvd.Sum, process_set=process_set, name='sbn.gb')
            torch.testing.assert_close(gw, ref.weight.grad, **TOL)
            torch.testing.assert_close(gb, ref.bias.grad, **TOL)
            ref.zero_grad()
            sync.zero_grad()
        torch.testing.assert_close(sync.running_mean, ref.running_mean, **TOL)
        torch.testing.assert_close(sync.running_var, ref.running_var, **TOL)
        assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    ref.eval()
    sync.eval()
    x, _ = full_batch(tail, ranks, 99)
    torch.testing.assert_close(sync(x[rows]), ref(x)[rows], **TOL)


@pytest.mark.parametrize('kind,tail,kw', CASES)
def test_matches_batchnorm_on_the_whole_batch(kind, tail, kw):
    run(kind, tail, kw, hvd.global_process_set, list(range(N)))


def test_without_running_stats_eval_uses_synced_batch_stats():
    c = 3
    ref = torch.nn.BatchNorm1d(c, track_running_stats=False).double()
    sync = hvd.SyncBatchNorm(c, track_running_stats=False).double()
    ref.eval()
    sync.eval()
    x, _ = full_batch([c], list(range(N)), 5)
    torch.testing.assert_close(sync(x[my_rows(list(range(N)))]), ref(x)[my_rows(list(range(N)))], **TOL)
    assert sync.running_mean is None


def test_process_set_excluding_a_rank():
    """The even ranks normalize together; the others are not members: their
    forward raises ValueError (as any collective on a foreign set)."""
    if N < 2:
        pytest.skip('needs 2 ranks')
    if R in EVEN.ranks:
        run('1d', [4], {}, EVEN, EVEN.ranks)
    else:
        sync = hvd.SyncBatchNorm(4, process_set=EVEN).double()
        if EVEN.size() == 1:
            x = torch.randn(3, 4, dtype=torch.float64)
            # A one-rank set needs no communication: plain BatchNorm.
            torch.testing.assert_close(sync(x), torch.nn.BatchNorm1d(4).double()(x), **TOL)
        else:
            with pytest.raises(ValueError, match='not a member'):
                sync(torch.randn(3, 4, dtype=torch.float64))


def test_convert_sync_batchnorm_and_errors():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU()).double()
    model[1].running_mean.fill_(0.5)
    conv = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(conv[1], hvd.SyncBatchNorm) and conv[1].process_set is hvd.global_process_set
    assert torch.equal(conv[1].running_mean, torch.full((4,), 0.5, dtype=torch.float64))
    with pytest.raises(ValueError, match='expected at least 2D input'):
        hvd.SyncBatchNorm(4)(torch.ones(4))
    with pytest.raises(ValueError, match='channels'):
        hvd.SyncBatchNorm(4)(torch.ones(2, 3))


def test_horovod_sync_batch_norm():
    """Horovod's test_torch.py::test_horovod_sync_batch_norm, on CPU: one
    sample per rank against BatchNorm1d on every rank's sample, float32, its
    tolerances (sums of absolute differences below 1e-6)."""
    ts_list = [
        torch.stack([torch.tensor([[r, r + 1], [r * 2, r * 2 + 1], [r * 3, r * 3 + 1], [r * 4, r * 4 + 1]])
                     for r in range(N)]),
        torch.stack([torch.tensor([[r + 1], [r * 2 + 1], [r * 3 + 1], [r * 4 + 1]]) for r in range(N)]),
    ]
    for i, ts in enumerate(ts_list):
        sync_bn = hvd.SyncBatchNorm(num_features=4)
        bn = torch.nn.BatchNorm1d(num_features=4)
        ts = ts.float()
        ts1 = ts.clone().requires_grad_()
        ts2 = ts.clone().requires_grad_()
        sync_bn_out = sync_bn(ts1[R].unsqueeze(0))
        bn_out = bn(ts2)
        assert (sync_bn_out - bn_out[R].unsqueeze(0)).abs().sum() < 1e-6
        assert (sync_bn.running_mean - bn.running_mean).abs().sum() < 1e-6
        assert (sync_bn.running_var - bn.running_var).abs().sum() < 1e-6
        sync_bn_out.sum().backward()
        bn_out.mean(dim=0).sum().backward()
        assert (hvd.allreduce(sync_bn.weight.grad, name='sync_bn.weight.grad.%d' % i) - bn.weight.grad).abs().sum() < 1e-6
        assert (hvd.allreduce(sync_bn.bias.grad, name='sync_bn.bias.grad.%d' % i) - bn.bias.grad).abs().sum() < 1e-6
        assert (hvd.allreduce(ts1.grad, name='ts1.grad.%d' % i) - ts2.grad).abs().sum() < 1e-6
