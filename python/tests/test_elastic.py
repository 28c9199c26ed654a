"""Elastic workers (docs/elastic.md, the worker side), as 3 ranks under
hvdrun with rank 0 of the job playing the elastic driver (elastic_driver.py
writes the assignments into hvdrun's store):

    HVD_TEST_NO_INIT=1 bin/hvdrun -np 3 python3 -m pytest python/tests/test_elastic.py

World 0 has 3 ranks. A host update removes worker h:2 (skip_sync, as
Horovod: only removed): h:2's init learns it was removed and run exits 0;
the others reset into world 1 of 2 ranks. There, a collective fails on every
rank (HorovodInternalError): the last commit is restored and they reset into
world 2. Process sets follow the rules: ids kept, ranks of callables
re-evaluated, sets whose ranks are gone unregistered with a warning.
"""
import os
import warnings

import pytest
import torch

RANK, N = int(os.environ['HOROVOD_RANK']), int(os.environ['HOROVOD_SIZE'])
os.environ.update(HOROVOD_ELASTIC='1', HVD_ELASTIC_WORKER_ID='h:%d' % RANK, HOROVOD_ELASTIC_TIMEOUT='60',
                  HOROVOD_DYNAMIC_PROCESS_SETS='1')

import hvd.torch as hvd  # noqa: E402
from elastic_driver import Driver  # noqa: E402

WORKERS = ['h:%d' % r for r in range(N)]
driver = Driver() if RANK == 0 else None
if driver:
    driver.publish(0, WORKERS)
EVENS = hvd.ProcessSet([0, 2])
HEAD = hvd.ProcessSet(lambda size: range(size - 1))
hvd.init(process_sets=[EVENS, HEAD])


def test_first_world():
    assert N == 3 and hvd.size() == 3 and hvd.rank() == RANK
    assert (EVENS.process_set_id, HEAD.process_set_id, HEAD.ranks) == (1, 2, [0, 1])
    if HEAD.included():
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=HEAD).item() == 2


def test_resets():
    torch.manual_seed(RANK)  # different on every rank: the first sync makes them equal
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = hvd.elastic.TorchState(model, opt, batch=0)
    last = hvd.add_process_set(hvd.ProcessSet(lambda size: [size - 1]))
    assert (last.process_set_id, last.ranks) == (3, [2])
    entries, resets, failed = [], [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        entries.append((hvd.size(), state.batch, model.weight.detach().clone()))
        while state.batch < 9:
            if driver and state.batch == 3 and hvd.size() == 3:
                driver.publish(1, WORKERS[:2], removed=['h:2'])
                driver.hosts_updated(1)
            if state.batch == 6 and not failed:
                failed.append(True)
                if driver:
                    driver.publish(2, WORKERS[:2])
                with torch.no_grad():
                    model.weight.add_(100)  # not committed: rolled back
                hvd.allreduce(torch.ones(RANK + 1), name='mismatch')  # fails on every rank
            torch.manual_seed(state.batch)
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                hvd.allreduce_(p.grad, op=hvd.Average, name='grad.%d' % state.batch)
            opt.step()
            state.batch += 1
            state.commit()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        if RANK == 2:
            with pytest.raises(SystemExit) as e:
                train(state)
            assert e.value.code == 0 and not hvd.is_initialized()
            return
        train(state)
    assert hvd.size() == 2 and state.batch == 9
    # World 0 from batch 0, world 1 from the commit at 4 (no sync), world 2
    # from the commit at 6 (restored, synced).
    assert [(n, b) for n, b, _ in entries] == [(3, 0), (2, 4), (2, 6)], entries
    assert resets == [2, 2]
    assert entries[2][2].abs().max() < 50  # the +100 was rolled back
    gathered = hvd.allgather(model.weight.detach().reshape(1, -1))
    assert torch.equal(gathered[0], gathered[1])
    # Process sets: ids kept, callables re-evaluated, [0, 2] unregistered.
    assert (HEAD.process_set_id, HEAD.ranks) == (2, [0])
    assert (last.process_set_id, last.ranks) == (3, [1])
    assert EVENS.process_set_id is None and 'unregistered' in EVENS.unregistered
    with pytest.raises(ValueError, match=r'ranks=\[0, 2\].*unregistered'):
        hvd.allreduce(torch.ones(1), process_set=EVENS)
    assert any('unregistered' in str(w.message) and '[0, 2]' in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    if last.included():
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=last).item() == 1
    # hvd.numpy's ObjectState on the same library.
    import hvd.numpy as hvdnp
    obj = hvdnp.elastic.ObjectState(step=RANK, names=['rank%d' % RANK])
    obj.sync()
    assert (obj.step, obj.names) == (0, ['rank0'])
    obj.step = 5
    obj.restore()
    assert obj.step == 0
    assert hvd.remove_process_set(HEAD)
    ps = hvd.add_process_set([0])  # the oldest freed id (1, not 2) is reused
    assert ps.process_set_id == 1


def test_sampler_after_reset():
    if RANK == 2:
        return  # removed from the job by test_resets
    assert hvd.size() == 2
    data = list(range(11))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0)
    order = torch.randperm(11, generator=torch.Generator().manual_seed(3)).tolist()
    mine = list(sampler)
    assert len(sampler) == 6 and mine == (order + order[:1])[RANK::2]
    sampler.record_batch(0, 2)  # 2 samples on each of 2 ranks
    state.commit()
    assert sampler.state_dict() == {'epoch': 0, 'processed_num': 4}
    sampler.record_batch(1, 2)
    state.restore()  # back to the commit
    sampler.reset()
    rest = list(sampler)
    both = hvd.allgather_object(rest)
    assert sorted(both[0] + both[1]) == sorted(order[4:] + order[4:5]) and len(sampler) == 4
    state.sync()  # rank 0's sampler state everywhere
    assert sampler.state_dict() == {'epoch': 0, 'processed_num': 4}
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and len(sampler) == 6
