"""hvd.torch point-to-point (send/recv, isend/irecv, autograd) under hvdrun
with 2 or 3 processes, in dynamic mode (HVD_TEST_DYNAMIC=1) so that the
tests that break a set's connections on purpose get a set of their own."""
import pytest
import torch

import hvd.torch as hvd

N = hvd.size()
R = hvd.rank()
RIGHT, LEFT = (R + 1) % N, (R - 1) % N


def pattern(frm, to, k, shape, dtype=torch.float64):
    g = torch.Generator().manual_seed(1000 * frm + 10 * to + k)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int32, torch.float16, torch.bool])
def test_chain_blocking(dtype):
    """Rank r receives from r-1 and sends to r+1, blocking, in the only
    order that is safe with rendezvous sends: the message walks the chain."""
    shape = (3, 5)
    if R > 0:
        got = hvd.recv(torch.empty(shape, dtype=dtype), R - 1, tag=7)
        assert torch.equal(got, pattern(0, 0, 1, shape, dtype))
    if R < N - 1:
        assert hvd.send(pattern(0, 0, 1, shape, dtype), R + 1, tag=7) is None


def test_neighbours_both_directions_async():
    """Every rank sends 4 MiB to both neighbours and receives from both, all
    posted before any wait: what a pipeline stage does in 1F1B. Blocking
    sends here deadlock; posted ops must progress independently."""
    if N == 1:
        return
    shape = (512, 1024)
    peers = sorted({RIGHT, LEFT})
    sends = [hvd.isend(pattern(R, p, k, shape), p, tag=k) for k in range(2) for p in peers]
    bufs = {(p, k): torch.empty(shape, dtype=torch.float64) for k in range(2) for p in peers}
    recvs = [(p, k, hvd.irecv(bufs[p, k], p, tag=k)) for k in range(2) for p in peers]
    for p, k, h in recvs:
        out = hvd.synchronize(h)
        assert out is bufs[p, k]
        assert torch.equal(out, pattern(p, R, k, shape))
    for h in sends:
        hvd.synchronize(h)


def test_poll_and_noncontiguous():
    """irecv into a non-contiguous view fills the view; poll turns true."""
    if N == 1:
        return
    if R == 0:
        src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        hvd.synchronize(hvd.isend(src.t(), 1, tag=1))  # non-contiguous send
    elif R == 1:
        base = torch.zeros(4, 6, dtype=torch.float32)
        view = base[:, ::2]  # 4x3, non-contiguous
        h = hvd.irecv(view, 0, tag=1)
        out = hvd.synchronize(h)
        assert out is view
        assert torch.equal(view, torch.arange(12, dtype=torch.float32).reshape(3, 4).t())
        assert torch.equal(base[:, 1::2], torch.zeros(4, 3))


def test_process_set_excluding_a_rank():
    """A set of ranks 0 and N-1 only: they exchange; others are refused."""
    ps = hvd.add_process_set([0, N - 1]) if N > 2 else hvd.global_process_set
    try:
        if R == 0 and N > 1:
            hvd.send(torch.full((4,), 3.0), N - 1, tag=2, process_set=ps)
        elif R == N - 1 and N > 1:
            assert torch.equal(hvd.recv(torch.empty(4), 0, tag=2, process_set=ps), torch.full((4,), 3.0))
        elif N > 2:
            with pytest.raises(ValueError, match='not a member'):
                hvd.isend(torch.ones(1), 0, process_set=ps)
    finally:
        if ps is not hvd.global_process_set:
            hvd.remove_process_set(ps)


def test_argument_errors():
    with pytest.raises(ValueError, match='this rank'):
        hvd.isend(torch.ones(1), R)
    with pytest.raises(ValueError, match='rank %d' % (N + 3)):
        hvd.irecv(torch.ones(1), N + 3)
    with pytest.raises(ValueError, match='tag'):
        hvd.isend(torch.ones(1), RIGHT, tag=-1)
    with pytest.raises(ValueError, match='global rank'):
        hvd.isend(torch.ones(1), '1')
    with pytest.raises(TypeError):
        hvd.isend([1.0], RIGHT)


def _mlp(seed):
    torch.manual_seed(seed)
    return [torch.nn.Linear(6, 6, bias=True).double() for _ in range(max(N, 1))]


def test_autograd_pipeline_matches_single_process():
    """Layer i lives on rank i; activations go forward with send/recv and
    gradients come back through autograd alone (loss.backward() on the last
    rank, the anchors' backward on the others). Every rank's parameter
    gradients equal those of the whole model run in one process."""
    layers = _mlp(5)
    x = torch.randn(8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    # Reference: the whole chain on every rank.
    ref = [torch.nn.Linear(6, 6).double() for _ in layers]
    for a, b in zip(ref, layers):
        a.load_state_dict(b.state_dict())
    h = x
    for layer in ref:
        h = torch.tanh(layer(h))
    h.pow(2).sum().backward()

    mine = layers[R]
    if R == 0:
        inp = x
    else:
        inp = hvd.recv(torch.empty(8, 6, dtype=torch.float64), R - 1, tag=11, requires_grad=True)
        assert inp.requires_grad and inp.grad_fn is not None
    out = torch.tanh(mine(inp))
    if R == N - 1:
        out.pow(2).sum().backward()
    else:
        anchor = hvd.send(out, R + 1, tag=11)
        assert anchor is not None and anchor.dim() == 0
        anchor.backward()
    torch.testing.assert_close(mine.weight.grad, ref[R].weight.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mine.bias.grad, ref[R].bias.grad, rtol=1e-12, atol=1e-12)


def test_zz_mismatch_fails_clearly():
    """A tag mismatch raises HorovodInternalError on the receiver naming
    both tags, instead of delivering wrong data. It breaks the set's
    point-to-point connections for good, so it runs last (zz) on a set of
    its own where there is room for one (np > 2), and collectives, which
    have their own connections, keep working."""
    if N == 1:
        return
    ps = hvd.add_process_set([0, 1]) if N > 2 else hvd.global_process_set
    try:
        if R == 0:
            h = hvd.isend(torch.ones(4), 1, tag=5, process_set=ps)
            try:
                hvd.synchronize(h)
            except hvd.HorovodInternalError:
                pass  # rendezvous backends fail the sender too
        elif R == 1:
            with pytest.raises(hvd.HorovodInternalError, match=r'tag 5.*tag 6|tag 6.*tag 5'):
                hvd.recv(torch.empty(4), 0, tag=6, process_set=ps)
    finally:
        if ps is not hvd.global_process_set:
            hvd.remove_process_set(ps)
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [N, N]
