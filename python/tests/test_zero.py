"""hvd.torch.ShardedOptimizer (ZeRO stages 1 and 2) and hvd.torch.checkpoint
(sharded checkpoints that load at another layout), under hvdrun at np 2, 3
and 4 with HVD_TEST_DYNAMIC=1 (the tests register the data- and
tensor-parallel sets of each layout they try; e2e TestPythonZero).

float64 throughout: N steps of the sharded optimizer equal N steps of the
plain DistributedOptimizer (Average) to 1e-12, every step; a checkpoint
saved at one layout and loaded at another continues training equal to the
uninterrupted run."""
import copy
import json
import os
import shutil
import tempfile

import pytest
import torch
import torch.nn.functional as F

import hvd.torch as hvd

N, R = hvd.size(), hvd.rank()
TOL = 1e-12
_sets = {}


def test_initialized_in_dynamic_mode():
    assert os.environ.get('HVD_TEST_DYNAMIC') == '1', 'run this file with HVD_TEST_DYNAMIC=1 (e2e/python_test.go)'


def pset(ranks):
    """The registered process set of these ranks (the global set for all
    of them). Collective: every rank calls it with the same ranks, in the
    same order."""
    ranks = tuple(sorted(ranks))
    if ranks == tuple(range(N)):
        return hvd.global_process_set
    if ranks not in _sets:
        _sets[ranks] = hvd.add_process_set(list(ranks))
    return _sets[ranks]


def partition(groups):
    """Registers every group (on every rank) and returns the one holding
    this rank."""
    mine = None
    for g in groups:
        ps = pset(g)
        if R in g:
            mine = ps
    return mine


def layout(t, d):
    """(tensor set or None, data set, shard index, replica index) of this
    rank at tensor-parallel size t, data-parallel size d (rank = replica * t
    + shard), registering every set of the layout."""
    assert t * d == N
    ts = partition([[rep * t + s for s in range(t)] for rep in range(d)]) if t > 1 else None
    ds = partition([[rep * t + s for rep in range(d)] for s in range(t)])
    return ts, ds, R % t, R // t


class Net(torch.nn.Module):
    """Layers of mixed sizes and a branch used only on even steps."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 7))
        self.branch = torch.nn.Linear(7, 7)
        self.head = torch.nn.Linear(7, 3)
        self.use_branch = True

    def forward(self, x):
        h = self.body(x)
        if self.use_branch:
            h = torch.tanh(self.branch(h))
        return self.head(h)


def groups(m, wd):
    """Two param groups: weights with weight decay, biases without."""
    return [{'params': [p for n, p in m.named_parameters() if n.endswith('weight')], 'weight_decay': wd},
            {'params': [p for n, p in m.named_parameters() if n.endswith('bias')], 'weight_decay': 0.0}]


OPTS = {
    'adamw': lambda m: torch.optim.AdamW(groups(m, 0.1), lr=0.01),
    'sgd': lambda m: torch.optim.SGD(groups(m, 1e-3), lr=0.05, momentum=0.9),
}


def named(m, tag):
    return [('%s.%s' % (tag, n), p) for n, p in m.named_parameters()]


def batch(step, index=R, count=N, rows=12):
    """Rows index of count of a seeded global batch: the average over the
    data set of mean losses is the mean loss of the global batch."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(rows, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (rows,), generator=g)
    k = rows // count
    return x[index * k:(index + 1) * k], y[index * k:(index + 1) * k]


def local_batch(step):
    """A batch of this rank's own (different on every rank)."""
    g = torch.Generator().manual_seed(100 * step + R)
    return torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (5,), generator=g)


def backward(m, step, passes=1, data=local_batch):
    m.use_branch = step % 2 == 0
    for k in range(passes):
        x, y = data(step * passes + k)
        F.cross_entropy(m(x), y).backward()


def close(a, b, what):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        d = (p - q).abs().max().item()
        assert d <= TOL, '%s: %s differs by %g' % (what, n, d)


def elementwise_bytes(opt):
    return sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
               if torch.is_tensor(v) and v.dim() > 0)


def pair(opt_name, tag, process_set=hvd.global_process_set, **kw):
    torch.manual_seed(0)
    a = Net().double()
    b = copy.deepcopy(a)
    pa = hvd.DistributedOptimizer(OPTS[opt_name](a), named_parameters=named(a, tag + '.plain'),
                                  backward_passes_per_step=kw.get('backward_passes_per_step', 1),
                                  process_set=process_set)
    sb = hvd.ShardedOptimizer(OPTS[opt_name](b), named_parameters=named(b, tag + '.zero'), process_set=process_set,
                              **kw)
    return a, pa, b, sb


@pytest.mark.parametrize('stage', [1, 2])
@pytest.mark.parametrize('passes', [1, 2])
@pytest.mark.parametrize('opt_name', ['adamw', 'sgd'])
def test_equals_plain_optimizer(opt_name, passes, stage):
    tag = 'eq.%s.%d.%d' % (opt_name, passes, stage)
    a, pa, b, sb = pair(opt_name, tag, stage=stage, backward_passes_per_step=passes, bucket_bytes=256)
    assert len(sb.buckets) > 2  # small buckets: several collectives per step
    for step in range(4):
        for m, o in ((a, pa), (b, sb)):
            o.zero_grad()
            m.use_branch = step % 2 == 0
            for k in range(passes):
                x, y = local_batch(step * passes + k)
                F.cross_entropy(m(x), y).backward()
                if o is sb and stage == 2 and k < passes - 1:
                    assert any(p.grad is not None for p in m.parameters()), 'a first pass accumulates locally'
            if o is sb and stage == 2:
                # Released as soon as reduced; a bucket holding a parameter
                # the pass did not use (the branch on odd steps) waits for
                # step(), which supplies its zeros.
                unused = set() if m.use_branch else set(m.branch.parameters())
                waiting = {p for bk in sb.buckets if unused & set(bk.params) for p in bk.params}
                held = [n for n, p in m.named_parameters() if p.grad is not None and p not in waiting]
                assert not held, 'stage 2 holds full gradients after the last backward pass: %s' % held
            o.step()
        close(a, b, 'step %d' % step)
        if stage == 2:
            assert all(p.grad is None for p in b.parameters())
    # Optimizer state: 1/D of the plain one per rank (up to the padding of
    # each bucket to a multiple of D), and the slices add up to it.
    d = N
    mine, plain = elementwise_bytes(sb.optimizer), elementwise_bytes(pa)
    nstates = 2 if opt_name == 'adamw' else 1
    pad = nstates * 8 * (d - 1) * len(sb.buckets)
    assert plain <= mine * d <= plain + pad, (mine, plain, d)
    total = hvd.allreduce(torch.tensor([float(mine)]), op=hvd.Sum).item()
    assert plain <= total <= plain + pad
    assert sb.state_bytes() >= mine


def test_state_lives_only_in_slices():
    a, pa, b, sb = pair('adamw', 'slices', stage=2, bucket_bytes=1 << 20)
    assert len(sb.buckets) == 2  # one bucket per group (one dtype)
    backward(b, 0)
    sb.step()
    for shard, st in sb.optimizer.state.items():
        assert st['exp_avg'].shape == shard.shape
        bucket = next(x for x in sb.buckets if x.shard is shard)
        assert shard.numel() * N == bucket.numel and bucket.numel - sum(p.numel() for p in bucket.params) < N
        assert shard.data_ptr() == bucket.flat.data_ptr() + R * shard.numel() * shard.element_size()
    for p in b.parameters():  # the model's parameters are views of the flat buffers
        assert any(x.flat.data_ptr() <= p.data_ptr() < x.flat.data_ptr() + x.numel * 8 for x in sb.buckets)


def test_step_lr_reaches_the_slices():
    a, pa, b, sb = pair('adamw', 'steplr', stage=1)
    sa = torch.optim.lr_scheduler.StepLR(pa, step_size=1, gamma=0.5)
    sbs = torch.optim.lr_scheduler.StepLR(sb, step_size=1, gamma=0.5)
    for step in range(3):
        for m, o, s in ((a, pa, sa), (b, sb, sbs)):
            o.zero_grad()
            backward(m, step)
            o.step()
            if o is sb:  # the inner groups stepped with the scheduler's lr of this step
                assert [g['lr'] for g in sb.optimizer.param_groups] == [0.01 * 0.5 ** step] * 2
            s.step()
        close(a, b, 'step %d' % step)
    assert sb.param_groups[0]['lr'] == pytest.approx(0.01 / 8)


@pytest.mark.parametrize('norm_type', [2.0, float('inf')])
@pytest.mark.parametrize('stage', [1, 2])
def test_clip_grad_norm_equals_torch(stage, norm_type):
    a, pa, b, sb = pair('sgd', 'clip.%d.%s' % (stage, norm_type), stage=stage, bucket_bytes=200)
    for step in range(3):
        pa.zero_grad()
        backward(a, step)
        pa.synchronize()
        want = torch.nn.utils.clip_grad_norm_(a.parameters(), 0.01, norm_type=norm_type)
        with pa.skip_synchronize():
            pa.step()
        sb.zero_grad()
        backward(b, step)
        got = sb.clip_grad_norm_(0.01, norm_type=norm_type)
        sb.step()
        assert want.item() > 0.01, 'the test must clip'
        assert abs(got.item() - want.item()) <= 1e-12 * want.item()
        close(a, b, 'step %d' % step)


def test_mixed_dtypes_and_untouched_parameters():
    torch.manual_seed(1)
    m = Net().double()
    m.scale = torch.nn.Parameter(torch.ones(3, dtype=torch.float32))
    frozen = torch.nn.Parameter(torch.full((4,), 7.0, dtype=torch.float64))
    outside = torch.nn.Parameter(torch.full((2,), 3.0, dtype=torch.float64))  # in no group
    m.frozen = frozen
    m.frozen.requires_grad_(False)
    m.outside = outside
    ref = copy.deepcopy(m)
    params = [p for n, p in m.named_parameters() if n != 'outside']
    sb = hvd.ShardedOptimizer(torch.optim.Adam(params, lr=0.01), named_parameters=named(m, 'mixed'))
    pa = hvd.DistributedOptimizer(torch.optim.Adam([p for n, p in ref.named_parameters() if n != 'outside'], lr=0.01),
                                  named_parameters=named(ref, 'mixed.plain'))
    assert sorted(str(x.flat.dtype) for x in sb.buckets) == ['torch.float32', 'torch.float64']
    for step in range(3):
        for mm, o in ((m, sb), (ref, pa)):
            o.zero_grad()
            x, y = local_batch(step)
            (F.cross_entropy(mm(x) * mm.scale.double(), y) + mm.outside.pow(2).sum()).backward()
            o.step()
        for (n, p), q in zip(m.named_parameters(), ref.parameters()):
            tol = 1e-6 if p.dtype == torch.float32 else TOL
            assert (p - q).abs().max().item() <= tol, n
    assert torch.equal(frozen, torch.full((4,), 7.0, dtype=torch.float64))
    assert torch.equal(outside, torch.full((2,), 3.0, dtype=torch.float64)) and outside.grad is not None


def test_set_that_leaves_ranks_out():
    """The world split into [0..N-2] and [N-1]: at np 3 a D=2 set and rank
    2 alone (D=1); at np 4 an odd D=3 set."""
    left, right = list(range(N - 1)), [N - 1]
    mine = partition([left, right])
    other = pset(right if R in left else left)
    with pytest.raises(ValueError, match='not a member'):
        hvd.ShardedOptimizer(torch.optim.SGD(Net().parameters(), lr=0.1), process_set=other)
    a, pa, b, sb = pair('adamw', 'excl', process_set=mine, stage=2, bucket_bytes=300)
    assert sb.optimizer.param_groups[0]['params'][0].numel() * mine.size() == sb.buckets[0].numel
    for step in range(3):
        for m, o in ((a, pa), (b, sb)):
            o.zero_grad()
            backward(m, step)
            o.step()
        close(a, b, 'step %d' % step)


def test_state_dict_round_trip_same_layout():
    a, pa, b, sb = pair('adamw', 'sd', stage=2, bucket_bytes=256)
    for step in range(2):
        sb.zero_grad()
        backward(b, step)
        sb.step()
    sd = sb.state_dict()
    c = copy.deepcopy(b)
    sc = hvd.ShardedOptimizer(OPTS['adamw'](c), named_parameters=named(c, 'sd.zero'), bucket_bytes=256)
    sc.load_state_dict(sd)
    for step in range(2, 4):
        for m, o in ((b, sb), (c, sc)):
            o.zero_grad()
            backward(m, step)
            o.step()
        close(b, c, 'step %d' % step)
    other = hvd.ShardedOptimizer(OPTS['adamw'](copy.deepcopy(b)), bucket_bytes=1 << 20)
    with pytest.raises(ValueError, match='another layout'):
        other.load_state_dict(sd)


def test_errors():
    m = Net()
    shared = torch.optim.SGD([{'params': [m.head.weight]}, {'params': [m.head.bias]}], lr=0.1)
    shared.param_groups[1]['params'].append(m.head.weight)  # torch refuses it at construction; by hand
    with pytest.raises(ValueError, match=r'shape \[3, 7\] is in param groups 0 and 1'):
        hvd.ShardedOptimizer(shared)
    with pytest.raises(ValueError, match='not a leaf'):
        hvd.ShardedOptimizer(_with_non_leaf())
    with pytest.raises(ValueError, match='LBFGS'):
        hvd.ShardedOptimizer(torch.optim.LBFGS(m.parameters()))

    class Lamb(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {'lr': 0.1})

    with pytest.raises(ValueError, match='elementwise=True'):
        hvd.ShardedOptimizer(Lamb(m.parameters()))
    with pytest.raises(ValueError, match='stage must be 1 or 2'):
        hvd.ShardedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), stage=3)
    for kw, what in ((dict(compression=hvd.Compression.fp16), 'compression'), (dict(op=hvd.Adasum), 'Adasum'),
                     (dict(overlap_forward=m), 'overlap_forward'), (dict(priorities='layer_order'), 'priorities')):
        with pytest.raises(ValueError, match=what):
            hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), zero_stage=2, **kw)
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=named(m, 'err'),
                                 zero_stage=1)
    assert isinstance(o, hvd.ShardedOptimizer) and o.stage == 1


def _with_non_leaf():
    base = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([torch.zeros(3, requires_grad=True)], lr=0.1)
    opt.param_groups[0]['params'] = [base * 2]  # torch refuses a non-leaf at construction; set it by hand
    return opt


# ---------------------------------------------------------- checkpoints

@pytest.fixture
def ckdir():
    d = hvd.broadcast_object(tempfile.mkdtemp(prefix='hvd-zero-') if R == 0 else None, root_rank=0,
                              name='test_zero.ckdir')
    yield os.path.join(d, 'ck')
    hvd.barrier()
    if R == 0:
        shutil.rmtree(d, ignore_errors=True)


def train(m, o, steps, start, data_set, data_index=None, clip=None):
    """Steps of the global-batch job: this rank's rows of each step's batch."""
    idx = data_set.rank() if data_index is None else data_index
    for step in range(start, start + steps):
        o.zero_grad()
        m.use_branch = step % 2 == 0
        x, y = batch(step, idx, data_set.size())
        F.cross_entropy(m(x), y).backward()
        o.step()


def fresh(opt_kind, process_set, seed=5):
    torch.manual_seed(seed)
    m = Net().double()
    names = list(m.named_parameters())
    if opt_kind == 'zero':
        return m, hvd.ShardedOptimizer(OPTS['adamw'](m), named_parameters=names, process_set=process_set,
                                       stage=2, bucket_bytes=300)
    if opt_kind == 'zero1':
        return m, hvd.ShardedOptimizer(OPTS['adamw'](m), named_parameters=names, process_set=process_set,
                                       stage=1)
    return m, hvd.DistributedOptimizer(OPTS['adamw'](m), named_parameters=names, process_set=process_set)


def test_checkpoint_reshards_data_parallel(ckdir):
    g = hvd.global_process_set
    m, o = fresh('zero', g, seed=3)
    train(m, o, 2, 0, g)
    hvd.checkpoint.save(ckdir, m.named_parameters(), o, data_set=g, extra={'step': 2})
    manifest = json.load(open(os.path.join(ckdir, 'manifest.json')))
    assert manifest['layout']['data_size'] == N and manifest['layout']['zero_stage'] == 2
    assert sorted(os.listdir(ckdir)) == sorted(['manifest.json', 'extra.pt'] + ['rank-%05d.pt' % r for r in range(N)])
    w = manifest['params']['body.0.weight']
    assert w['shape'] == [10, 6] and w['dtype'] == 'float64'
    ranges = sorted(pc['range'] for pc in w['pieces'] if pc['key'] == 'exp_avg')
    assert ranges[0][0] == 0 and ranges[-1][1] == 60 and all(x[1] == y[0] for x, y in zip(ranges, ranges[1:]))
    assert len({pc['file'] for pc in w['pieces']}) == len(ranges) >= 1
    train(m, o, 2, 2, g)
    p1 = copy.deepcopy(m)
    train(m, o, 2, 4, g)
    p2 = copy.deepcopy(m)

    # At another data-parallel layout: the world split in two sets (np 4:
    # {0,1},{2,3}; np 3: {0,1},{2}; np 2: {0},{1}), each a whole replica.
    half = partition([list(range((N + 1) // 2)), list(range((N + 1) // 2, N))])
    m2, o2 = fresh('zero', half)
    extra = hvd.checkpoint.load(ckdir, m2.named_parameters(), o2, data_set=half)
    assert extra == {'step': 2}
    train(m2, o2, 2, 2, half)
    close(p1, m2, 'ZeRO D=%d resumed at D=%d' % (N, half.size()))

    # Into a plain DistributedOptimizer, then saved by it and loaded into
    # ZeRO stage 1 again.
    m3, o3 = fresh('plain', g)
    hvd.checkpoint.load(ckdir, m3.named_parameters(), o3, data_set=g)
    train(m3, o3, 2, 2, g)
    close(p1, m3, 'ZeRO checkpoint resumed by a plain optimizer')
    hvd.checkpoint.save(ckdir, m3.named_parameters(), o3, data_set=g)
    manifest = json.load(open(os.path.join(ckdir, 'manifest.json')))
    files = {pc['file'] for e in manifest['params'].values() for pc in e['pieces']}
    assert files == {'rank-00000.pt'}, 'replicas of an unsharded optimizer are written by one member only'
    m4, o4 = fresh('zero1', g)
    assert hvd.checkpoint.load(ckdir, m4.named_parameters(), o4, data_set=g) is None
    train(m4, o4, 2, 4, g)
    close(p2, m4, 'plain checkpoint resumed by ZeRO stage 1')


def test_checkpoint_errors(ckdir):
    g = hvd.global_process_set
    with pytest.raises(ValueError, match='manifest.json does not exist'):
        hvd.checkpoint.load(ckdir, Net().named_parameters(), None, data_set=g)
    m, o = fresh('zero', g)
    train(m, o, 1, 0, g)
    partition([list(range(N - 1)), [N - 1]])
    wrong = pset([N - 1]) if R == 0 else g  # rank 0 alone passes a set it is not in: every rank raises
    with pytest.raises(ValueError, match='not saved: rank 0: hvd: checkpoint: data_set must be the data-parallel'):
        hvd.checkpoint.save(ckdir, m.named_parameters(), o, data_set=wrong)
    assert not os.path.exists(ckdir)
    hvd.checkpoint.save(ckdir, m.named_parameters(), o, data_set=g)
    big = Net().double()
    big.body[2] = torch.nn.Linear(10, 9).double()
    with pytest.raises(ValueError, match=r'does not match the model: body\.2\.weight is \[7, 10\] in the checkpoint '
                                         r'and \[9, 10\] here'):
        hvd.checkpoint.load(ckdir, big.named_parameters(), None, data_set=g)
    with pytest.raises(ValueError, match='does not match the model: body.0.weight is float64 in the checkpoint'):
        hvd.checkpoint.load(ckdir, Net().named_parameters(), None, data_set=g)
    with pytest.raises(ValueError, match='it has no parameter extra.weight'):
        hvd.checkpoint.load(ckdir, list(m.named_parameters()) + [('extra.weight', torch.zeros(2))], None, data_set=g)
    hvd.barrier()
    if R == 0:
        with open(os.path.join(ckdir, 'manifest.json'), 'w') as f:
            f.write('{"format": "hvd-sharded-checkpoint", "params": ')
    hvd.barrier()
    with pytest.raises(ValueError, match='manifest.json is not a readable checkpoint manifest'):
        hvd.checkpoint.load(ckdir, m.named_parameters(), o, data_set=g)


def test_crash_before_rename_keeps_the_old_checkpoint(ckdir):
    g = hvd.global_process_set
    m, o = fresh('zero', g)
    train(m, o, 2, 0, g)
    hvd.checkpoint.save(ckdir, m.named_parameters(), o, data_set=g, extra='first')
    saved = copy.deepcopy(m)
    train(m, o, 2, 2, g)
    after = copy.deepcopy(m)

    def crash(tmp):
        assert os.path.exists(os.path.join(tmp, 'rank-%05d.pt' % R))
        raise RuntimeError('killed')
    hvd.checkpoint.before_commit = crash
    try:
        with pytest.raises(RuntimeError, match='killed'):
            hvd.checkpoint.save(ckdir, m.named_parameters(), o, data_set=g, extra='second')
    finally:
        hvd.checkpoint.before_commit = None
    m2, o2 = fresh('zero', g)
    assert hvd.checkpoint.load(ckdir, m2.named_parameters(), o2, data_set=g) == 'first'
    close(saved, m2, 'the old checkpoint')
    train(m2, o2, 2, 2, g)
    close(after, m2, 'resumed from the old checkpoint')
    hvd.checkpoint.save(ckdir, m.named_parameters(), o, data_set=g, extra='third')  # cleans the leftover
    hvd.barrier()
    parent = os.path.dirname(ckdir)
    assert sorted(os.listdir(parent)) == ['ck']


# ------------------------------------------------ tensor-parallel resharding

GLOBAL = {'fc1.weight': ([12, 6], 0), 'fc1.bias': ([12], 0), 'fc2.weight': ([4, 12], 1), 'fc2.bias': ([4], None)}


class TPNet(torch.nn.Module):
    """y = tanh(x W1^T + b1) W2^T + b2 with W1, b1 split by rows
    (column-parallel) and W2 by columns (row-parallel) over the
    tensor-parallel set, b2 replicated. The forward pass gathers the global
    tensors over the set (hvd.allgather, whose backward hands each member
    its chunk's gradient), so the result is the unsplit model's."""

    def __init__(self, t, shard, ts):
        super().__init__()
        self.t, self.ts = t, ts
        self.params = {}
        for name, (shape, dim) in GLOBAL.items():
            local = list(shape)
            if dim is not None:
                local[dim] //= t
            p = torch.nn.Parameter(torch.zeros(local, dtype=torch.float64))
            if dim is not None:
                p.hvd_tensor_parallel = (dim, shard, t)
            self.register_parameter(name.replace('.', '_'), p)
            self.params[name] = p

    def full(self, name):
        p, dim = self.params[name], GLOBAL[name][1]
        if dim is None or self.t == 1:
            return p
        if dim == 0:
            return hvd.allgather(p, process_set=self.ts)
        return hvd.allgather(p.t().contiguous(), process_set=self.ts).t()

    def forward(self, x):
        h = torch.tanh(x @ self.full('fc1.weight').t() + self.full('fc1.bias'))
        return h @ self.full('fc2.weight').t() + self.full('fc2.bias')

    def named(self):
        return list(self.params.items())

    def init(self):
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for name, p in self.params.items():
                full = torch.randn(GLOBAL[name][0], generator=g, dtype=torch.float64) * 0.5
                dim = GLOBAL[name][1]
                p.copy_(full if dim is None else full.chunk(self.t, dim)[R % self.t])


def tp_job(t, d):
    ts, ds, shard, replica = layout(t, d)
    m = TPNet(t, shard, ts)
    o = hvd.ShardedOptimizer(torch.optim.AdamW(m.parameters(), lr=0.02, weight_decay=0.05),
                             named_parameters=m.named(), process_set=ds, stage=2, bucket_bytes=200)
    return m, o, ts, ds, replica


def tp_train(m, o, ts, ds, replica, steps, start, norms):
    for step in range(start, start + steps):
        o.zero_grad()
        g = torch.Generator().manual_seed(500 + step)
        x = torch.randn(12, 6, generator=g, dtype=torch.float64)
        y = torch.randn(12, 4, generator=g, dtype=torch.float64)
        k = 12 // ds.size()
        F.mse_loss(m(x[replica * k:(replica + 1) * k]), y[replica * k:(replica + 1) * k]).backward()
        extra = [ts] if ts is not None else []
        norms.append(o.clip_grad_norm_(0.3, extra_process_sets=extra, replicated_over=ts).item())
        o.step()


def tp_global(m):
    with torch.no_grad():
        return {name: m.full(name).detach().clone() for name in GLOBAL}


def test_checkpoint_reshards_tensor_parallel(ckdir):
    t_save = 2 if N % 2 == 0 else N
    m, o, ts, ds, rep = tp_job(t_save, N // t_save)
    m.init()
    norms = []
    tp_train(m, o, ts, ds, rep, 2, 0, norms)
    hvd.checkpoint.save(ckdir, m.named(), o, data_set=ds, tensor_set=ts)
    manifest = json.load(open(os.path.join(ckdir, 'manifest.json')))
    assert manifest['layout']['tensor_size'] == t_save
    w2 = manifest['params']['fc2.weight']
    assert w2['shape'] == [4, 12] and {tuple(pc['chunk']) for pc in w2['pieces']} == \
        {(1, i, t_save) for i in range(t_save)}
    b2 = manifest['params']['fc2.bias']
    writers = {int(pc['file'][5:10]) for pc in b2['pieces']}
    assert all(r % t_save == 0 for r in writers), 'a replicated parameter is written by tensor member 0 only'
    ref_norms = []
    tp_train(m, o, ts, ds, rep, 2, 2, ref_norms)
    want = tp_global(m)
    assert max(ref_norms) > 0.3, 'the test must clip'
    for t in sorted({1, 4 if N == 4 else N} - {t_save}):
        m2, o2, ts2, ds2, rep2 = tp_job(t, N // t)
        hvd.checkpoint.load(ckdir, m2.named(), o2, data_set=ds2, tensor_set=ts2)
        got_norms = []
        tp_train(m2, o2, ts2, ds2, rep2, 2, 2, got_norms)
        got = tp_global(m2)
        for name in GLOBAL:
            dmax = (got[name] - want[name]).abs().max().item()
            assert dmax <= TOL, 'saved at T=%d, resumed at T=%d: %s differs by %g' % (t_save, t, name, dmax)
        assert got_norms == pytest.approx(ref_norms, rel=1e-12, abs=0)
