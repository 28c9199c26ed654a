"""Where a training step's time goes (issue 27): the step of step_time.py's
model split into phases, for hvd.torch's DistributedOptimizer, torch DDP
(gloo) and the same model with no communication at all (the compute floor),
in the same processes, rounds interleaved. Run under hvdrun:

  bin/hvdrun -np 2 /usr/bin/python3 bench/python/step_phases.py --hidden 64

Phases (median microseconds over the timed steps of a round, then the median
over rounds; rank 0's figures):
  fwd   zero_grad + forward + loss
  bwd   loss.backward() (hvd: the hooks enqueue each gradient's allreduce;
        DDP: its reducer allreduces buckets and waits at the end)
  sync  hvd: optimizer.synchronize() (wait for every allreduce); others 0
  upd   the optimizer's update (hvd: inside skip_synchronize)
  step  the whole step, timed around the four
"""
import argparse
import copy
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import hvd.torch as hvd
from steps import init_beside_ddp, mlp, mlp_batches

p = argparse.ArgumentParser()
p.add_argument('--hidden', type=int, default=64)
p.add_argument('--steps', type=int, default=200)
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--batch', type=int, default=64)
p.add_argument('--all-ranks', action='store_true', help='every rank prints its phases (rank skew shows as sync on the early rank)')
p.add_argument('--quantiles', action='store_true', help='also print the step time quantiles of each kind')
p.add_argument('--kinds', default='local,hvd,ddp',
               help='local, ddp, hvd (the default DistributedOptimizer) and hvd:B (bucket_bytes=B)')
args = p.parse_args()

rank, size = init_beside_ddp(hvd, 29534)
torch.manual_seed(0)
base = mlp(args.hidden)
data = mlp_batches(rank, args.batch)

models = {}
m = copy.deepcopy(base)
models['local'] = (m, torch.optim.SGD(m.parameters(), lr=0.01), None)
m = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base))
models['ddp'] = (m, torch.optim.SGD(m.parameters(), lr=0.01), None)
kinds = args.kinds.split(',')
for kind in kinds:
    if kind.startswith('hvd'):
        m = copy.deepcopy(base)
        kw = {'bucket_bytes': int(kind[4:])} if ':' in kind else {}
        models[kind] = (m, hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01),
                                                    named_parameters=m.named_parameters(), **kw), 'hvd')
PH = ('fwd', 'bwd', 'sync', 'upd', 'step')


def one(kind, batch):
    model, opt, h = models[kind]
    x, y = batch
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    if h:
        opt.synchronize()
        t3 = time.perf_counter()
        with opt.skip_synchronize():
            opt.step()
    else:
        t3 = t2
        opt.step()
    t4 = time.perf_counter()
    return (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)


res = {k: {ph: [] for ph in PH} for k in kinds}
steps_all = {k: [] for k in kinds}
for r in range(args.rounds):
    for kind in kinds:
        for i in range(10):
            one(kind, data[i % len(data)])
        hvd.barrier()
        rows = [one(kind, data[i % len(data)]) for i in range(args.steps)]
        steps_all[kind].extend(row[4] for row in rows)
        for j, ph in enumerate(PH):
            res[kind][ph].append(statistics.median(row[j] for row in rows) * 1e6)
if args.all_ranks:
    for r in range(size):
        if r == rank:
            for kind in kinds:
                print('rank %d %-8s' % (rank, kind) + ''.join('%10.0f' % statistics.median(res[kind][ph]) for ph in PH), flush=True)
        hvd.barrier()
if rank == 0:
    print('# np=%d hidden=%d params=%d batch=%d steps=%d rounds=%d' % (
        size, args.hidden, sum(q.numel() for q in base.parameters()), args.batch, args.steps, args.rounds))
    print('%-14s' % 'kind' + ''.join('%10s' % ph for ph in PH))
    for kind in kinds:
        print('%-14s' % kind + ''.join('%10.0f' % statistics.median(res[kind][ph]) for ph in PH))
    if args.quantiles:
        print('step quantiles (us): p10 p25 p50 p75 p90')
        for kind in kinds:
            q = statistics.quantiles(steps_all[kind], n=20)
            print('%-14s' % kind + ''.join('%10.0f' % (q[i] * 1e6) for i in (1, 4, 9, 14, 17)))
dist.destroy_process_group()
hvd.shutdown()
