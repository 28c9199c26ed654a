"""hvd.torch.tensor_parallel under hvdrun (np 2, 3, 4), with
HVD_TEST_DYNAMIC=1 so this file can register the sets it needs (conftest's
EVEN/ODD sets are not contiguous tensor-parallel groups):

- WORLD: every rank (T = N);
- the pairs {0,1}, {2,3}, ... (at np 4 two sets of T=2 run the same tests at
  the same time on different data; at np 3 rank 2 is left alone in {2},
  its T=1 path, while {0,1} runs T=2; at np 2 the pair is WORLD);
- SOLO: a set of one rank per rank (T=1, no collective).

Every rank builds the dense reference in float64 from the same seed (the
seed depends on the set, so two sets never compute the same numbers) and
checks the parallel pieces against it: forward outputs, input gradients and
every parameter's gradient against the matching slice of the dense one
(param.hvd_tensor_parallel says which), to 1e-12."""
import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hvd.torch as hvd
import hvd.torch.tensor_parallel as tp

assert os.environ.get('HVD_TEST_DYNAMIC') == '1', 'run this file with HVD_TEST_DYNAMIC=1 (see e2e/python_test.go)'

N = hvd.size()
R = hvd.rank()
TOL = dict(rtol=1e-12, atol=1e-12)
_registered = {}


def _set(ranks):
    """The registered set of these ranks (add_process_set is collective:
    every rank calls this in the same order at import)."""
    ranks = sorted(ranks)
    if ranks == list(range(N)):
        return hvd.global_process_set
    if tuple(ranks) not in _registered:
        _registered[tuple(ranks)] = hvd.add_process_set(ranks)
    return _registered[tuple(ranks)]


WORLD = hvd.global_process_set
PAIRS = [_set(range(i, min(i + 2, N))) for i in range(0, N, 2)]
SOLOS = [_set([r]) for r in range(N)]
SETS = {'world': WORLD, 'pair': PAIRS[R // 2], 'solo': SOLOS[R]}


@pytest.fixture(params=['world', 'pair', 'solo'])
def ps(request):
    return SETS[request.param]


def seed_of(ps, k=0):
    return 1000 * ps.ranks[0] + 17 * len(ps.ranks) + k


def rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def shard(full, param):
    dim, index, count = param.hvd_tensor_parallel
    return full.chunk(count, dim)[index]


def close(a, b):
    torch.testing.assert_close(a, b, **TOL)


def check_grads(par, dense_params):
    """Every parameter of par against the dense one of the same name:
    the slice for a sharded one, the whole for a replicated one."""
    got = dict(par.named_parameters())
    assert set(got) == set(dense_params), (sorted(got), sorted(dense_params))
    for name, p in got.items():
        d = dense_params[name]
        want_w, want_g = (shard(d, p), shard(d.grad, p)) if hasattr(p, tp.ATTR) else (d, d.grad)
        assert p.shape == want_w.shape, name
        close(p.detach(), want_w.detach())
        close(p.grad, want_g)


# ----------------------------------------------------------------- dense


class Attn(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(hidden, hidden) for _ in range(4))
        self.heads = heads

    def forward(self, x):
        b, s, h = x.shape
        hd = h // self.heads
        q, k, v = (m(x).view(b, s, self.heads, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
        att = q @ k.transpose(-2, -1) / math.sqrt(hd)
        att = att.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float('-inf')).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.fc, self.act, self.proj = nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, attn, mlp, hidden):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = nn.LayerNorm(hidden), attn, nn.LayerNorm(hidden), mlp

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def parallel_block(dense, ps):
    block = Block(tp.ParallelSelfAttention.from_dense(dense.attn, ps), tp.ParallelMLP.from_dense(dense.mlp, ps),
                  dense.ln1.normalized_shape[0]).double()
    block.ln1.load_state_dict(dense.ln1.state_dict())
    block.ln2.load_state_dict(dense.ln2.state_dict())
    return block


# ------------------------------------------------------------ primitives

@pytest.mark.parametrize('dim', [0, 1, -1])
def test_scatter_and_gather(ps, dim):
    t = len(ps.ranks)
    index = ps.rank()
    x = rand(2 * t, 3 * t, 2 * t, seed=seed_of(ps)).requires_grad_()
    g = rand(*x.shape, seed=seed_of(ps, 1))
    y = tp.scatter_to_tensor_parallel(x, ps, dim)
    close(y, x.detach().chunk(t, dim)[index])
    (y * g.chunk(t, dim)[index]).sum().backward()
    close(x.grad, g)  # every member's chunk of the gradient, gathered

    part = x.detach().chunk(t, dim)[index].clone().requires_grad_()
    z = tp.gather_from_tensor_parallel(part, ps, dim)
    close(z, x.detach())
    (z * g).sum().backward()
    close(part.grad, g.chunk(t, dim)[index])


def test_copy_to_and_reduce_from(ps):
    t, k = len(ps.ranks), ps.rank() + 1
    x = rand(3, 4, seed=seed_of(ps)).requires_grad_()
    g = rand(3, 4, seed=seed_of(ps, 1))
    y = tp.copy_to_tensor_parallel(x, ps)
    close(y, x.detach())
    (y * g * k).sum().backward()  # member k contributes k*g
    close(x.grad, g * (t * (t + 1) // 2))

    xk = (x.detach() * k).requires_grad_()
    z = tp.reduce_from_tensor_parallel(xk, ps)
    close(z, x.detach() * (t * (t + 1) // 2))
    (z * g).sum().backward()
    close(xk.grad, g)


def test_scatter_of_an_indivisible_dimension():
    t = N
    ps = WORLD
    with pytest.raises(ValueError, match=r'dimension -1 of size %d is not divisible by the tensor-parallel size %d'
                       % (2 * t + 1, t)):
        tp.scatter_to_tensor_parallel(torch.ones(2, 2 * t + 1), ps)
    with pytest.raises(ValueError, match=r'dimension 0 of size 1 is not divisible'):
        tp.scatter_to_tensor_parallel(torch.ones(1, 2 * t), ps, dim=0)


# ---------------------------------------------------------------- linears

@pytest.mark.parametrize('gather_output', [False, True])
@pytest.mark.parametrize('bias', [True, False])
def test_column_parallel_linear(ps, gather_output, bias):
    t, index = len(ps.ranks), ps.rank()
    torch.manual_seed(seed_of(ps))
    dense = nn.Linear(5, 4 * t, bias=bias).double()
    par = tp.ColumnParallelLinear.from_dense(dense, ps, gather_output=gather_output)
    assert par.weight.hvd_tensor_parallel == (0, index, t) and par.weight.shape == (4, 5)
    x = rand(2, 3, 5, seed=seed_of(ps, 1))
    g = rand(2, 3, 4 * t, seed=seed_of(ps, 2))
    xd, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
    yd = dense(xd)
    (yd * g).sum().backward()
    yp = par(xp)
    if gather_output:
        close(yp, yd.detach())
        (yp * g).sum().backward()
    else:
        close(yp, yd.detach().chunk(t, -1)[index])
        (yp * g.chunk(t, -1)[index]).sum().backward()
    close(xp.grad, xd.grad)
    check_grads(par, dict(dense.named_parameters()))


@pytest.mark.parametrize('input_is_parallel', [True, False])
@pytest.mark.parametrize('bias', [True, False])
def test_row_parallel_linear(ps, input_is_parallel, bias):
    t, index = len(ps.ranks), ps.rank()
    torch.manual_seed(seed_of(ps))
    dense = nn.Linear(3 * t, 4, bias=bias).double()
    par = tp.RowParallelLinear.from_dense(dense, ps, input_is_parallel=input_is_parallel)
    assert par.weight.hvd_tensor_parallel == (1, index, t) and par.weight.shape == (4, 3)
    if bias:
        assert not hasattr(par.bias, tp.ATTR) and par.bias.shape == (4,)
    x = rand(2, 3, 3 * t, seed=seed_of(ps, 1))
    g = rand(2, 3, 4, seed=seed_of(ps, 2))
    xd = x.clone().requires_grad_()
    (dense(xd) * g).sum().backward()
    xp = (x.chunk(t, -1)[index] if input_is_parallel else x).clone().requires_grad_()
    yp = par(xp)
    close(yp, dense(x).detach())
    (yp * g).sum().backward()
    close(xp.grad, xd.grad.chunk(t, -1)[index] if input_is_parallel else xd.grad)
    check_grads(par, dict(dense.named_parameters()))


def test_constructors_hold_the_seeded_dense_slices(ps):
    # Same seed on every member: the shards are slices of the nn.Linear /
    # nn.Embedding that seed builds (so they differ across members).
    t = len(ps.ranks)
    pairs = [(lambda: tp.ColumnParallelLinear(6, 2 * t, ps, dtype=torch.float64),
              lambda: nn.Linear(6, 2 * t, dtype=torch.float64)),
             (lambda: tp.RowParallelLinear(2 * t, 6, ps, dtype=torch.float64),
              lambda: nn.Linear(2 * t, 6, dtype=torch.float64)),
             (lambda: tp.VocabParallelEmbedding(3 * t, 4, ps, dtype=torch.float64),
              lambda: nn.Embedding(3 * t, 4, dtype=torch.float64))]
    for make_par, make_dense in pairs:
        torch.manual_seed(seed_of(ps))
        par = make_par()
        torch.manual_seed(seed_of(ps))
        dense = make_dense()
        for name, p in par.named_parameters():
            assert p.dtype == torch.float64
            d = dict(dense.named_parameters())[name]
            close(p.detach(), shard(d, p).detach() if hasattr(p, tp.ATTR) else d.detach())
    if t > 1:  # the members' shards are different parts, all of them
        w = hvd.allgather(par.weight.detach(), process_set=ps)
        close(w, dense.weight.detach())


# ------------------------------------------------------ attention and MLP

def test_parallel_mlp(ps):
    t = len(ps.ranks)
    torch.manual_seed(seed_of(ps))
    dense = MLP(6, 4 * t).double()
    par = tp.ParallelMLP.from_dense(dense, ps)
    x = rand(2, 3, 6, seed=seed_of(ps, 1))
    g = rand(2, 3, 6, seed=seed_of(ps, 2))
    xd, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
    yd = dense(xd)
    (yd * g).sum().backward()
    tp.reset_collective_stats()
    yp = par(xp)
    close(yp, yd.detach())
    (yp * g).sum().backward()
    close(xp.grad, xd.grad)
    check_grads(par, dict(dense.named_parameters()))
    # One allreduce of [2, 3, 6] float64 forward (proj), one backward (the input).
    assert tp.collective_stats() == {'allreduce': (2, 2 * 36 * 8) if t > 1 else (0, 0), 'allgather': (0, 0)}


@pytest.mark.parametrize('heads_per_shard', [1, 2])
def test_parallel_self_attention(ps, heads_per_shard):
    t, index = len(ps.ranks), ps.rank()
    heads, hd = heads_per_shard * t, 3
    torch.manual_seed(seed_of(ps))
    dense = Attn(heads * hd, heads).double()
    par = tp.ParallelSelfAttention.from_dense(dense, ps)
    assert par.local_heads == heads_per_shard and par.q.weight.shape == (heads_per_shard * hd, heads * hd)
    # Member index owns heads [index*heads/T, (index+1)*heads/T): its q rows.
    first = index * heads_per_shard * hd
    close(par.q.weight.detach(), dense.q.weight.detach()[first:first + heads_per_shard * hd])
    x = rand(2, 5, heads * hd, seed=seed_of(ps, 1))
    g = rand(2, 5, heads * hd, seed=seed_of(ps, 2))
    xd, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
    yd = dense(xd)
    (yd * g).sum().backward()
    tp.reset_collective_stats()
    yp = par(xp)
    close(yp, yd.detach())
    (yp * g).sum().backward()
    close(xp.grad, xd.grad)
    check_grads(par, dict(dense.named_parameters()))
    assert tp.collective_stats()['allreduce'] == ((2, 2 * x.numel() * 8) if t > 1 else (0, 0))


def test_gpt_block(ps):
    t = len(ps.ranks)
    hidden, heads = 4 * t, 2 * t
    torch.manual_seed(seed_of(ps))
    dense = Block(Attn(hidden, heads), MLP(hidden, 3 * hidden), hidden).double()
    par = parallel_block(dense, ps)
    x = rand(3, 4, hidden, seed=seed_of(ps, 1))
    g = rand(3, 4, hidden, seed=seed_of(ps, 2))
    xd, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
    (dense(xd) * g).sum().backward()
    yp = par(xp)
    close(yp, dense(x).detach())
    (yp * g).sum().backward()
    close(xp.grad, xd.grad)
    check_grads(par, dict(dense.named_parameters()))  # LayerNorms: the whole dense gradient


# ------------------------------------------------- vocabulary parallelism

def test_vocab_parallel_embedding(ps):
    t = len(ps.ranks)
    torch.manual_seed(seed_of(ps))
    dense = nn.Embedding(5 * t, 3).double()
    par = tp.VocabParallelEmbedding.from_dense(dense, ps)
    assert par.weight.hvd_tensor_parallel == (0, ps.rank(), t)
    ids = torch.randint(0, 5 * t, (4, 6), generator=torch.Generator().manual_seed(seed_of(ps, 1)))
    ids[0, :2] = torch.tensor([0, 5 * t - 1])  # both ends of the vocabulary
    g = rand(4, 6, 3, seed=seed_of(ps, 2))
    (dense(ids) * g).sum().backward()
    y = par(ids)
    close(y, dense(ids).detach())
    (y * g).sum().backward()
    check_grads(par, dict(dense.named_parameters()))


@pytest.mark.parametrize('scale', [1.0, 1e4])
def test_vocab_parallel_cross_entropy(ps, scale):
    # scale 1e4: exp() of the raw logits overflows; the max shift keeps it finite.
    t, index = len(ps.ranks), ps.rank()
    vocab = 7 * t
    logits = rand(3, 5, vocab, seed=seed_of(ps)) * scale
    target = torch.randint(0, vocab, (3, 5), generator=torch.Generator().manual_seed(seed_of(ps, 1)))
    target[0, 0], target[0, 1], target[1, 2] = 0, vocab - 1, -100  # ends, and an ignored token
    g = rand(3, 5, seed=seed_of(ps, 2))
    ld = logits.clone().requires_grad_()
    want = F.cross_entropy(ld.view(-1, vocab), target.view(-1), reduction='none').view(3, 5)
    (want * g).sum().backward()
    lp = logits.chunk(t, -1)[index].clone().requires_grad_()
    tp.reset_collective_stats()
    loss = tp.vocab_parallel_cross_entropy(lp, target, ps)
    assert torch.isfinite(loss).all()
    close(loss, want.detach())
    assert loss[1, 2].item() == 0
    (loss * g).sum().backward()
    close(lp.grad, ld.grad.chunk(t, -1)[index])
    assert lp.grad[1, 2].abs().sum().item() == 0
    assert tp.collective_stats()['allreduce'][0] == (2 if t > 1 else 0)  # max, then both sums at once


def test_embedding_tied_head_and_loss_end_to_end(ps):
    # ids -> embedding -> block -> logits with the embedding's weight (tied)
    # -> cross entropy: the embedding's gradient sums both of its uses.
    t = len(ps.ranks)
    vocab, hidden, heads = 6 * t, 2 * t, t
    torch.manual_seed(seed_of(ps))
    emb = nn.Embedding(vocab, hidden).double()
    block = Block(Attn(hidden, heads), MLP(hidden, 4 * hidden), hidden).double()
    gen = torch.Generator().manual_seed(seed_of(ps, 1))
    ids = torch.randint(0, vocab, (2, 5), generator=gen)
    target = torch.randint(0, vocab, (2, 5), generator=gen)
    want = F.cross_entropy((block(emb(ids)) @ emb.weight.t()).view(-1, vocab), target.view(-1))
    want.backward()

    pemb = tp.VocabParallelEmbedding.from_dense(emb, ps)
    pblock = parallel_block(block, ps)
    h = pblock(pemb(ids))
    logits = tp.parallel_lm_logits(h, pemb.weight, ps)
    assert logits.shape == (2, 5, vocab // t)
    loss = tp.vocab_parallel_cross_entropy(logits, target, ps).mean()
    close(loss, want.detach())
    loss.backward()
    check_grads(pemb, dict(emb.named_parameters()))
    check_grads(pblock, dict(block.named_parameters()))


def test_parallel_lm_logits_with_column_parallel_head(ps):
    t, index = len(ps.ranks), ps.rank()
    torch.manual_seed(seed_of(ps))
    head = nn.Linear(4, 3 * t, bias=False).double()
    par = tp.ColumnParallelLinear.from_dense(head, ps)
    h = rand(2, 4, seed=seed_of(ps, 1))
    hd, hp = h.clone().requires_grad_(), h.clone().requires_grad_()
    g = rand(2, 3 * t, seed=seed_of(ps, 2))
    (head(hd) * g).sum().backward()
    y = tp.parallel_lm_logits(hp, par.weight, ps)
    close(y, head(h).detach().chunk(t, -1)[index])
    (y * g.chunk(t, -1)[index]).sum().backward()
    close(hp.grad, hd.grad)
    check_grads(par, dict(head.named_parameters()))


# ----------------------------------------------------------------- errors

def test_sizes_not_divisible_name_the_numbers_and_the_set():
    ranks = ' '.join(str(r) for r in range(N))
    where = r'the tensor-parallel size %d \(process set 0 \[%s\]\)' % (N, ranks)
    bad = 2 * N + 1
    with pytest.raises(ValueError, match=r'^ColumnParallelLinear: out_features %d is not divisible by %s'
                       % (bad, where)):
        tp.ColumnParallelLinear(4, bad, WORLD)
    with pytest.raises(ValueError, match=r'^RowParallelLinear: in_features %d is not divisible by %s' % (bad, where)):
        tp.RowParallelLinear(bad, 4, WORLD)
    with pytest.raises(ValueError, match=r'^VocabParallelEmbedding: num_embeddings %d is not divisible by %s'
                       % (bad, where)):
        tp.VocabParallelEmbedding(bad, 4, WORLD)
    with pytest.raises(ValueError, match=r'^ParallelSelfAttention: heads %d is not divisible by %s' % (N + 1, where)):
        tp.ParallelSelfAttention(2 * (N + 1), N + 1, WORLD)
    with pytest.raises(ValueError, match=r'^ParallelSelfAttention: hidden 10 is not divisible by heads 4'):
        tp.ParallelSelfAttention(10, 4, WORLD)
    with pytest.raises(ValueError, match=r'^ParallelMLP: ffn %d is not divisible by %s' % (bad, where)):
        tp.ParallelMLP(4, bad, WORLD)


def test_caller_not_a_member():
    other = SOLOS[(R + 1) % N]
    msg = r'this process \(rank %d\) is not a member of the tensor-parallel process set %d \[%d\]' % (
        R, other.process_set_id, (R + 1) % N)
    for make in (lambda: tp.ColumnParallelLinear(2, 2, other), lambda: tp.RowParallelLinear(2, 2, other),
                 lambda: tp.VocabParallelEmbedding(2, 2, other), lambda: tp.ParallelSelfAttention(2, 1, other),
                 lambda: tp.ParallelMLP(2, 2, other), lambda: tp.copy_to_tensor_parallel(torch.ones(2), other),
                 lambda: tp.reduce_from_tensor_parallel(torch.ones(2), other),
                 lambda: tp.scatter_to_tensor_parallel(torch.ones(2), other),
                 lambda: tp.gather_from_tensor_parallel(torch.ones(2), other),
                 lambda: tp.parallel_lm_logits(torch.ones(2), torch.ones(1, 2), other),
                 lambda: tp.vocab_parallel_cross_entropy(torch.ones(1, 2), torch.zeros(1, dtype=torch.int64), other)):
        with pytest.raises(ValueError, match=msg):
            make()
    with pytest.raises(ValueError, match='is not registered'):
        tp.ColumnParallelLinear(2, 2, hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match='must be an hvd ProcessSet'):
        tp.ColumnParallelLinear(2, 2, [0])


def test_bad_ids_and_targets(ps):
    t = len(ps.ranks)
    emb = tp.VocabParallelEmbedding(2 * t, 3, ps)
    with pytest.raises(ValueError, match=r'id %d is outside the vocabulary \[0, %d\)' % (2 * t, 2 * t)):
        emb(torch.tensor([0, 2 * t]))
    with pytest.raises(ValueError, match=r'id -1 is outside'):
        emb(torch.tensor([-1]))
    logits = torch.zeros(4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r'id %d is outside the vocabulary \[0, %d\)' % (2 * t, 2 * t)):
        tp.vocab_parallel_cross_entropy(logits, torch.tensor([0, 1, 2 * t, 0]), ps)
    with pytest.raises(ValueError, match=r'logits \(4, 2\) must be target \(3,\) plus the vocabulary dimension'):
        tp.vocab_parallel_cross_entropy(logits, torch.tensor([0, 1, 0]), ps)
    with pytest.raises(ValueError, match='target must be int64'):
        tp.vocab_parallel_cross_entropy(logits, torch.tensor([0, 1, 0, 0], dtype=torch.int32), ps)
    # Nothing above reached a collective: the set still works, in step.
    assert tp.reduce_from_tensor_parallel(torch.ones(1), ps).item() == t


def test_single_rank_set_issues_no_collective():
    solo = SOLOS[R]
    torch.manual_seed(5)
    dense = Block(Attn(4, 2), MLP(4, 8), 4).double()
    par = parallel_block(dense, solo)
    emb = tp.VocabParallelEmbedding(6, 4, solo, dtype=torch.float64)
    tp.reset_collective_stats()
    h = par(emb(torch.tensor([[1, 5, 0]])))
    loss = tp.vocab_parallel_cross_entropy(tp.parallel_lm_logits(h, emb.weight, solo), torch.tensor([[2, 3, 4]]), solo)
    loss.sum().backward()
    y = tp.gather_from_tensor_parallel(tp.scatter_to_tensor_parallel(torch.ones(2, 4), solo), solo)
    assert y.shape == (2, 4)
    assert tp.collective_stats() == {'allreduce': (0, 0), 'allgather': (0, 0)}
    assert all(p.hvd_tensor_parallel[1:] == (0, 1) for p in par.parameters() if hasattr(p, tp.ATTR))
