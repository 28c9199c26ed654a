"""The host-staged path of CUDA tensors in hvd.torch (tensors.py), on every
rank under hvdrun: bin/hvdrun -np 3 python3 -m pytest python/tests/test_cuda_staging.py

This machine's torch is CPU-only, so CUDA tensors are played by FakeCuda: a
tensor that says it is on cuda:0 and whose memory must never be handed to
the engine (data_ptr() raises), so a test passes only if every op went
through a host copy and the result came back "on the device". Real CUDA
tensors run the same tests where torch.cuda.is_available()
(scripts/gpu-check.sh)."""
import pytest
import torch

import hvd.torch as hvd
from hvd.torch import tensors

REAL_CUDA = torch.cuda.is_available()


class FakeCuda(torch.Tensor):
    """A CPU tensor that plays a CUDA one for .is_cuda, .device, .cpu(),
    .copy_() and .to(); its memory is off limits to hvd."""
    copies = {'d2h': 0, 'h2d': 0}
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def of(t):
        return torch.Tensor._make_subclass(FakeCuda, t.clone())

    @property
    def device(self):
        return torch.device('cuda', 0)

    @property
    def is_cuda(self):
        return True

    def data_ptr(self):
        raise AssertionError('hvd handed CUDA memory to the engine instead of staging it')

    def plain(self):
        return self.as_subclass(torch.Tensor)

    def cpu(self):
        FakeCuda.copies['d2h'] += 1
        return self.plain().clone()

    def detach(self):
        return FakeCuda.of(self.plain().detach())

    def copy_(self, src, non_blocking=False):
        FakeCuda.copies['h2d'] += 1
        self.plain().copy_(src)
        return self


def cuda(t):
    return t.cuda() if REAL_CUDA else FakeCuda.of(t)


def on_device(x):
    return x.is_cuda and x.device.type == 'cuda'


def host(x):
    return x.cpu() if not isinstance(x, FakeCuda) else x.plain()


def _to_fake(self, device, *a, **k):
    return FakeCuda.of(self)


@pytest.fixture(autouse=True)
def fake_to(monkeypatch):
    # .to(cuda) of a host result: the stand-in for a host-to-device copy.
    if not REAL_CUDA:
        monkeypatch.setattr(tensors, 'to_device', lambda h, like: FakeCuda.of(h))
    FakeCuda.copies = {'d2h': 0, 'h2d': 0}


def test_allreduce_is_staged_and_comes_back_on_the_device():
    r, n = hvd.rank(), hvd.size()
    x = cuda(torch.arange(6, dtype=torch.float32) + r)
    out = hvd.allreduce(x, op=hvd.Sum)
    assert on_device(out)
    want = torch.arange(6, dtype=torch.float32) * n + sum(range(n))
    assert torch.equal(host(out), want)
    if not REAL_CUDA:
        assert FakeCuda.copies['d2h'] >= 1


def test_inplace_allreduce_writes_the_callers_tensor():
    r, n = hvd.rank(), hvd.size()
    x = cuda(torch.full((4,), float(r + 1), dtype=torch.float64))
    y = hvd.allreduce_(x, op=hvd.Average)
    assert y is x and on_device(x)
    assert torch.allclose(host(x), torch.full((4,), (n + 1) / 2, dtype=torch.float64))
    if not REAL_CUDA:
        assert FakeCuda.copies['h2d'] == 1


def test_grouped_mixed_devices():
    r, n = hvd.rank(), hvd.size()
    a = cuda(torch.ones(3, dtype=torch.int32) * r)
    b = torch.ones(2, dtype=torch.int64) * (r + 1)
    outs = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    assert on_device(outs[0]) and outs[1].device.type == 'cpu'
    assert host(outs[0]).tolist() == [sum(range(n))] * 3
    assert outs[1].tolist() == [n * (n + 1) // 2] * 2


def test_allgather_broadcast_alltoall_reducescatter():
    r, n = hvd.rank(), hvd.size()
    g = hvd.allgather(cuda(torch.full((r + 1, 2), float(r))))
    assert on_device(g) and host(g)[:, 0].tolist() == [float(k) for k in range(n) for _ in range(k + 1)]
    b = cuda(torch.full((3,), float(r)))
    hvd.broadcast_(b, root_rank=n - 1)
    assert host(b).tolist() == [float(n - 1)] * 3
    out, splits = hvd.alltoall(cuda(torch.arange(n, dtype=torch.float32) + 10 * r), splits=[1] * n)
    assert on_device(out) and host(out).tolist() == [float(10 * k + r) for k in range(n)]
    assert splits.tolist() == [1] * n
    rs = hvd.reducescatter(cuda(torch.ones(n * 2, dtype=torch.float32)), op=hvd.Sum)
    assert on_device(rs) and host(rs).tolist() == [float(n)] * 2


def test_nccl_built_is_truthful():
    # The ABI carries no device yet, so NCCL is not used from Python.
    assert hvd.nccl_built() == 0
