"""Training step with the backward pass overlapping communication: hvd.torch's
DistributedOptimizer with priorities=None (Horovod's order) against
priorities='layer_order' (issue 18), on a model with many layers of mixed
sizes, the same data and initial weights, in the same processes, alternating
rounds so that both see the same machine state. Prints per round the median
step time of each and the ratio on/off. Run under hvdrun, e.g.

    bin/hvdrun -np 2 /usr/bin/python3 bench/python/priority_step.py
    HOROVOD_CYCLE_TIME=1 bin/hvdrun -np 2 ... (rounds paced: more tensors per round)
"""
import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument('--layers', type=int, default=24)
p.add_argument('--steps', type=int, default=60)
p.add_argument('--rounds', type=int, default=4)
p.add_argument('--batch', type=int, default=32)
args = p.parse_args()

torch.set_num_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()

# Mixed sizes: wide, narrow and bottleneck layers (parameters from 1 k to
# 0.5 M per layer), so that gradients of very different sizes become ready
# during the backward pass.
widths = [256, 512, 64, 1024, 32, 256, 128, 512]
torch.manual_seed(0)
layers, d = [], 64
for i in range(args.layers):
    w = widths[i % len(widths)]
    layers += [torch.nn.Linear(d, w), torch.nn.ReLU()]
    d = w
layers.append(torch.nn.Linear(d, 10))
base = torch.nn.Sequential(*layers)
nparams = sum(q.numel() for q in base.parameters())
g = torch.Generator().manual_seed(rank)
data = [(torch.randn(args.batch, 64, generator=g), torch.randint(0, 10, (args.batch,), generator=g)) for _ in range(8)]

runs = {}
for label, prio in (('off', None), ('layer_order', 'layer_order')):
    m = copy.deepcopy(base)
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.001),
                                 named_parameters=[('%s.%s' % (label, n), q) for n, q in m.named_parameters()],
                                 priorities=prio)
    runs[label] = (m, o)


def step(model, opt, i):
    x, y = data[i % len(data)]
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


def timed(model, opt):
    for i in range(5):
        step(model, opt, i)
    hvd.barrier()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(model, opt, i)
        times.append(time.perf_counter() - t0)
    t = hvd.allreduce(torch.tensor([statistics.median(times)]), op=hvd.Max, name='prio.step.time')
    return t.item() * 1e3


if rank == 0:
    print('# priority_step np=%d layers=%d params=%d batch=%d' % (size, args.layers, nparams, args.batch))
    print('# round  off_ms  layer_order_ms  ratio(on/off)')
ratios = []
for r in range(args.rounds):
    order = ['off', 'layer_order'] if r % 2 == 0 else ['layer_order', 'off']
    res = {k: timed(*runs[k]) for k in order}
    ratios.append(res['layer_order'] / res['off'])
    if rank == 0:
        print('  %d  %.3f  %.3f  %.3f' % (r, res['off'], res['layer_order'], ratios[-1]), flush=True)
# Both trained on the same data from the same weights: same parameters.
a = torch.cat([q.detach().flatten() for q in runs['off'][0].parameters()])
b = torch.cat([q.detach().flatten() for q in runs['layer_order'][0].parameters()])
if rank == 0:
    print('# median ratio on/off %.3f; max |param difference| %.2e' % (statistics.median(ratios), (a - b).abs().max().item()))
hvd.shutdown()
