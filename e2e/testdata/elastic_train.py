"""Elastic training for e2e/elastic_test.go and bench/elastic: run by
hvdrun's elastic driver, with hvd.torch.elastic (TorchState, ElasticSampler),
a process set given as a function of the size and a dynamic set ([0, 1],
added in the first world of 3 workers or more).

Every line it prints starts with a tag and carries key=value fields; the
test parses them (docs/elastic.md, "Tests"):

  BOOT  t=   the process started (before torch is imported)
  ENTER world= size= rank= pid= port= epoch= batch= commits= sum= sets= synced= t=
      the training function starts in a world (after the sync from rank 0,
      at synced; t after the process-set checks);
      sets=ok when an allreduce on every registered process set gave the
      right answer and the sets hold the ranks the reset rules give
  SAVE  world= rank= epoch= batch= commits= sum=     a commit's save
  RESTORE t= world= rank= epoch= batch= commits= sum=   after a failure
  FAULT world= rank= t=   HorovodInternalError seen (monotonic clock)
  STEP  world= rank= commits= t=   the first step completed in a world
  DONE  world= size= rank= epoch= batch= commits= sum= same=

sum is a digest of the model's parameters and the optimizer's state.

Control, by files in $HVD_TEST_DIR (written by the test):
  stop          rank 0 sees it: every rank returns (an allreduce decides)
  fail.<wid>    that worker raises RuntimeError at its next step (exit 1)
  fail.all      every worker raises at its next step
SIGUSR1 dumps the Python threads' stacks to stderr (faulthandler).
Environment: HVD_TEST_STEP_SLEEP (seconds per step, default 0.02),
HVD_TEST_NOCOMMIT=1 (never commit: a failure restores the initial state),
HVD_TEST_MAX_COMMITS (ends training, default 3000). All times are
time.monotonic() (CLOCK_MONOTONIC, one clock for every process here), as in
the sdk's HVD_ELASTIC_TRACE=1 lines that bench/elastic reads.
"""
import faulthandler
import hashlib
import os
import signal
import sys
import time

print('BOOT t=%.6f' % time.monotonic(), flush=True)  # before torch is imported
# The test sends SIGUSR1 (and SIGUSR2: hvd's goroutines, HVD_STACKS_ON_SIGNAL=1)
# to a job that stops making progress: the stacks say where each worker is.
faulthandler.register(signal.SIGUSR1, all_threads=True)

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402
from hvd.common import _abi, process_sets  # noqa: E402

DIR = sys.argv[1] if len(sys.argv) > 1 else os.environ["HVD_TEST_DIR"]
WID = os.environ['HVD_ELASTIC_WORKER_ID']
SLEEP = float(os.environ.get('HVD_TEST_STEP_SLEEP', '0.02'))
NOCOMMIT = os.environ.get('HVD_TEST_NOCOMMIT') == '1'
MAX_COMMITS = int(os.environ.get('HVD_TEST_MAX_COMMITS', '3000'))
BATCH = 4


def log(tag, **kv):
    print(tag + ' ' + ' '.join('%s=%s' % (k, v) for k, v in kv.items()), flush=True)


EVENS = hvd.ProcessSet(lambda size: range(0, size, 2))
hvd.init(process_sets=[EVENS])  # HOROVOD_DYNAMIC_PROCESS_SETS=1: add_process_set works
PAIR = None  # the dynamic set [0, 1], added in the first world of 3 or more

torch.manual_seed(0)
data = torch.randn(512, 8, dtype=torch.float64)
target = data @ torch.arange(1., 9., dtype=torch.float64).reshape(8, 1)
dataset = torch.utils.data.TensorDataset(data, target)
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
model = torch.nn.Linear(8, 1).double()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def digest():
    h = hashlib.sha1()
    for t in model.state_dict().values():
        h.update(t.detach().numpy().tobytes())
    for s in opt.state_dict()['state'].values():
        for v in s.values():
            if torch.is_tensor(v):
                h.update(v.numpy().tobytes())
    return h.hexdigest()[:16]


class LoggedState(hvd.elastic.TorchState):
    def fields(self):
        return dict(world=_abi.elastic_epoch(), rank=hvd.rank(), epoch=self.epoch, batch=self.batch,
                    commits=self.commits, sum=digest())

    def save(self):
        super().save()
        if hasattr(self, 'commits'):
            log('SAVE', **self.fields())

    def restore(self):
        super().restore()
        log('RESTORE', t='%.6f' % time.monotonic(), **self.fields())


state = LoggedState(model, opt, sampler=sampler, epoch=0, batch=0, commits=0)


def check_sets():
    """An allreduce on every registered set, by its members, in id order;
    the held objects hold the ranks the reset rules give."""
    global PAIR
    size, rank, bad = hvd.size(), hvd.rank(), []
    reg = process_sets.registered()
    if size >= 3 and [0, 1] not in reg.values():
        # Collective, on every rank of the world (they see the same
        # registry); a worker that joins later adopts the set from rank 0
        # without holding an object for it.
        PAIR = hvd.add_process_set([0, 1])
        reg = process_sets.registered()
    if EVENS.ranks != list(range(0, size, 2)) or reg.get(EVENS.process_set_id) != EVENS.ranks:
        bad.append('evens=%s' % EVENS.ranks)
    if PAIR is not None:
        if size >= 2 and (PAIR.ranks != [0, 1] or reg.get(PAIR.process_set_id) != [0, 1]):
            bad.append('pair=%s' % PAIR.ranks)
        if size < 2 and PAIR.process_set_id is not None:
            bad.append('pair kept in a world of 1')
    for pid in sorted(reg):
        ranks = reg[pid]
        if rank not in ranks:
            continue
        ps = hvd.ProcessSet(ranks)
        ps.process_set_id = pid
        got = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum, name='check.%d' % pid, process_set=ps)
        if got.item() != sum(r + 1 for r in ranks):
            bad.append('set %d %s summed %s' % (pid, ranks, got.item()))
    return 'ok' if not bad else 'BAD:' + ';'.join(bad).replace(' ', '')


def stop_now():
    flag = torch.tensor([1.0 if (hvd.rank() == 0 and os.path.exists(os.path.join(DIR, 'stop'))) else 0.0])
    return hvd.allreduce(flag, op=hvd.Max, name='stop').item() > 0 or state.commits >= MAX_COMMITS


def fault():
    for name in ('fail.' + WID, 'fail.all'):
        p = os.path.join(DIR, name)
        if os.path.exists(p):
            if name != 'fail.all':
                os.remove(p)
            raise RuntimeError('HVD_TEST: worker %s fails on purpose (%s)' % (WID, name))


def step(x, y):
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for i, p in enumerate(model.parameters()):
        hvd.allreduce_(p.grad, op=hvd.Average, name='grad.%d' % i)
    opt.step()


@hvd.elastic.run
def train(state):
    synced = time.monotonic()
    world = _abi.elastic_epoch()
    f = state.fields()
    log('ENTER', world=world, size=hvd.size(), rank=hvd.rank(), pid=os.getpid(), port=os.environ.get('HOROVOD_GLOO_RENDEZVOUS_PORT', ''), epoch=f['epoch'],
        batch=f['batch'], commits=f['commits'], sum=f['sum'], sets=check_sets(), synced='%.6f' % synced, t='%.6f' % time.monotonic())
    first = True
    try:
        while True:
            loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler)
            for x, y in loader:
                fault()
                if stop_now():
                    return
                step(x, y)
                sampler.record_batch(state.batch, BATCH)
                state.batch += 1
                state.commits += 1
                if first:
                    log('STEP', world=world, rank=hvd.rank(), commits=state.commits, t='%.6f' % time.monotonic())
                    first = False
                if not NOCOMMIT:
                    state.commit()
                time.sleep(SLEEP)
            state.epoch += 1
            state.batch = 0
            sampler.set_epoch(state.epoch)
    except hvd.HorovodInternalError:
        log('FAULT', world=world, rank=hvd.rank(), t='%.6f' % time.monotonic())
        raise


train(state)
w = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).reshape(1, -1))
f = state.fields()
log('DONE', world=f['world'], size=hvd.size(), rank=f['rank'], epoch=f['epoch'], batch=f['batch'],
    commits=f['commits'], sum=f['sum'], same=all(torch.equal(w[0], r) for r in w))
