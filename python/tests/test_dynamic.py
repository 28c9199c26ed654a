"""Dynamic process sets (hvd.init(process_sets="dynamic")); run under
hvdrun with HVD_TEST_DYNAMIC=1 so that conftest initializes in dynamic mode.
Tests run in order; the last one shuts hvd down. The e2e test runs this
file on the default data plane (shared memory) and on HVD_BACKEND=tcp."""
import os

import pytest
import torch

import hvd.torch as hvd

N = hvd.size()
R = hvd.rank()
PAIR = [N - 1, 0] if N > 2 else [N - 1]  # never the whole job
_sets = {}


def test_initialized_in_dynamic_mode():
    assert os.environ.get('HVD_TEST_DYNAMIC') == '1', 'run this file with HVD_TEST_DYNAMIC=1 (see e2e/python_test.go)'
    assert hvd.is_initialized() and hvd.size() == N


def test_add_and_use():
    ps = hvd.add_process_set(PAIR)
    assert ps.process_set_id == 1 and ps.ranks == sorted(PAIR)
    assert ps.size() == len(ps.ranks) and ps.included() == (R in PAIR)
    if ps.included():
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=ps).item() == len(ps.ranks)
        assert hvd.allgather(torch.tensor([R]), process_set=ps).tolist() == ps.ranks
    else:
        with pytest.raises(ValueError):
            hvd.allreduce(torch.ones(1), process_set=ps)
    ps2 = hvd.add_process_set(hvd.ProcessSet([0]))
    assert ps2.process_set_id == 2
    _sets['pair'], _sets['zero'] = ps, ps2


def test_add_errors():
    with pytest.raises(ValueError):
        hvd.add_process_set(list(range(N)))  # duplicate of the global set
    with pytest.raises(ValueError):
        hvd.add_process_set([0, N])  # rank out of range
    with pytest.raises(ValueError):
        hvd.add_process_set(_sets['pair'])  # already registered
    with pytest.raises(ValueError):
        hvd.add_process_set([0])  # duplicate of an added set


def test_remove_fails_pending_ops():
    ps = _sets['pair']
    h = None
    if R == 0 and len(ps.ranks) > 1:
        h = hvd.allreduce_async(torch.ones(1), name='orphan', process_set=ps)  # the other member never submits it
    assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None and ps.size() is None
    if h is not None:
        with pytest.raises(hvd.HorovodInternalError):
            hvd.synchronize(h)
    assert hvd.remove_process_set(ps) is False
    assert hvd.remove_process_set(hvd.global_process_set) is False
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(1), process_set=ps)
    assert hvd.remove_process_set(_sets['zero']) is True


def test_readd_after_remove():
    # Freed ids are reused oldest first (1 and 2 are free here, so they
    # alternate) and the same ranks come back under the same id: each build
    # must get fresh communicators (not the removed set's).
    seen = set()
    for i in range(6):
        ranks = PAIR if i % 2 == 0 else [0]
        ps = hvd.add_process_set(ranks)
        assert ps.process_set_id in (1, 2)
        seen.add((ps.process_set_id, tuple(ps.ranks)))
        if ps.included():
            out = hvd.allreduce(torch.tensor([float(R + 1)]), op=hvd.Sum, process_set=ps)
            assert out.item() == sum(r + 1 for r in ps.ranks)
        assert hvd.remove_process_set(ps) is True
    assert len(seen) == 2  # each (id, ranks) pair was built three times


def test_zz_shutdown():
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match='not been initialized'):
        hvd.rank()
    assert hvd.global_process_set.ranks == []
    hvd.shutdown()  # twice is harmless
