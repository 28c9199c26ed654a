"""Sharded optimizer state: the same model (an MLP of ~20 M float32
parameters) on the same data with AdamW, in the same processes, one variant
after the other:

  zro-ddp   torch.distributed.optim.ZeroRedundancyOptimizer + DDP (gloo)
  hvd-z1    hvd.ShardedOptimizer stage 1
  hvd-z2    hvd.ShardedOptimizer stage 2
  hvd-plain hvd.DistributedOptimizer (every rank holds the whole state)

Per variant: the median step time, the optimizer state bytes this rank
holds (the tensors of the optimizer's state), and the peak RSS of the
variant (VmHWM, reset through /proc/self/clear_refs before it starts, so
each variant's peak is its own: the model, gradients, state and
communication buffers). Every variant takes the same steps from the same
parameters: the final parameters are compared with hvd-plain's in the same
run. Run under hvdrun with the bench lock:

  flock /tmp/hvd-bench.lock env PYTHONPATH=build/python bin/hvdrun -np 2 \\
      /usr/bin/python3 bench/python/zero_step.py
"""
import argparse
import copy
import gc
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer

import hvd.torch as hvd
from steps import init_beside_ddp

p = argparse.ArgumentParser()
p.add_argument('--hidden', type=int, default=2048, help='2048: ~21 M parameters (6 layers)')
p.add_argument('--layers', type=int, default=6)
p.add_argument('--batch', type=int, default=32)
p.add_argument('--steps', type=int, default=10)
p.add_argument('--warmup', type=int, default=3)
p.add_argument('--variants', default='zro-ddp,hvd-z1,hvd-z2,hvd-plain')
p.add_argument('--rounds', type=int, default=2, help='each round builds and times every variant once')
args = p.parse_args()

rank, size = init_beside_ddp(hvd, 29534)


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers - 1):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(args.hidden, 16))
    return torch.nn.Sequential(*layers)


g = torch.Generator().manual_seed(rank)
data = [(torch.randn(args.batch, args.hidden, generator=g), torch.randint(0, 16, (args.batch,), generator=g))
        for _ in range(4)]


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)


def build(kind):
    m = make_model()
    if kind == 'zro-ddp':
        ddp = torch.nn.parallel.DistributedDataParallel(m)
        return ddp, m, ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4,
                                               weight_decay=0.01)
    if kind == 'hvd-plain':
        return m, m, hvd.DistributedOptimizer(adamw(m.parameters()), named_parameters=m.named_parameters())
    stage = 1 if kind == 'hvd-z1' else 2
    return m, m, hvd.ShardedOptimizer(adamw(m.parameters()), named_parameters=m.named_parameters(), stage=stage)


def state_bytes(opt):
    inner = getattr(opt, 'optimizer', None) if isinstance(opt, hvd.ShardedOptimizer) else \
        getattr(opt, 'optim', opt)
    return sum(v.numel() * v.element_size() for s in inner.state.values() for v in s.values() if torch.is_tensor(v))


def status_kib(field):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return 0


def reset_peak():
    gc.collect()
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def step(model, opt, batch):
    x, y = batch
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()


results, finals = {}, {}
nparams = sum(q.numel() for q in make_model().parameters())
for rnd in range(args.rounds):
    for kind in args.variants.split(','):
        ok = reset_peak()
        rss0 = status_kib('VmRSS')
        model, inner_model, opt = build(kind)
        for i in range(args.warmup):
            step(model, opt, data[i % len(data)])
        hvd.barrier()
        times = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            step(model, opt, data[i % len(data)])
            times.append(time.perf_counter() - t0)
        peak = status_kib('VmHWM') if ok else 0
        prev = results.get(kind, ([], 0, 0, 0))
        # (step medians of the rounds, state bytes, peak RSS, peak growth over the RSS at the variant's start)
        results[kind] = (prev[0] + [statistics.median(times)], state_bytes(opt), max(prev[2], peak),
                         max(prev[3], peak - rss0))
        finals[kind] = torch.cat([q.detach().reshape(-1) for q in inner_model.parameters()]).clone()
        del model, inner_model, opt
        gc.collect()
        hvd.barrier()

rows = hvd.allgather_object(results, name='zero_step.results')
if rank == 0:
    ref = finals.get('hvd-plain')
    print('# np=%d params=%d (%.1f MB float32) hidden=%d layers=%d batch=%d steps=%d (median), AdamW' %
          (size, nparams, nparams * 4 / 1e6, args.hidden, args.layers, args.batch, args.steps))
    print('%-10s %18s %14s %12s %20s %22s %14s' % ('variant', 'step ms (rounds)', 'state MB/rank', 'state/plain',
                                                    'peak RSS MB/rank', 'peak growth MB/rank', 'max|p-plain|'))
    plain_state = rows[0].get('hvd-plain', (0, 0))[1]
    for kind in args.variants.split(','):
        meds = ' '.join('%.0f' % (statistics.median(r[kind][0][i] for r in rows) * 1e3) for i in range(args.rounds))
        st = max(r[kind][1] for r in rows) / 1e6
        ratio = '%.3f' % (max(r[kind][1] for r in rows) / plain_state) if plain_state else '-'
        peaks = ' '.join('%.0f' % (r[kind][2] / 1024) for r in rows)
        growth = ' '.join('%.0f' % (r[kind][3] / 1024) for r in rows)
        diff = '%.1e' % (finals[kind] - ref).abs().max().item() if ref is not None else '-'
        print('%-10s %18s %14.1f %12s %20s %22s %14s' % (kind, meds, st, ratio, peaks, growth, diff))
    print('# step: median over ranks of each round\'s median step; peak RSS: VmHWM while the variant ran (reset '
          'before it, max over rounds); peak growth: that peak minus the RSS when the variant started')
dist.destroy_process_group()
hvd.shutdown()
