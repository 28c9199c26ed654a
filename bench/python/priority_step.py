"""Training step with the backward pass overlapping communication: hvd.torch's
DistributedOptimizer with priorities=None (Horovod's order) against
priorities='layer_order' (issue 18), each also with overlap_forward=model (the
update of each layer deferred to the next forward pass, which then overlaps
the remaining allreduces), on a model with many layers of mixed
sizes, the same data and initial weights, in the same processes, alternating
rounds so that both see the same machine state. Prints per round the median
step time of each and the ratio on/off. Run under hvdrun, e.g.

    bin/hvdrun -np 2 /usr/bin/python3 bench/python/priority_step.py
    HOROVOD_CYCLE_TIME=1 bin/hvdrun -np 2 ... (rounds paced: more tensors per round)
"""
import argparse
import copy
import statistics

import torch

import hvd.torch as hvd
from steps import median_step_seconds

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
MODES = (('off', None, False), ('layer_order', 'layer_order', False), ('overlap', None, True),
         ('overlap+layer_order', 'layer_order', True))
for label, prio, overlap in MODES:
    m = copy.deepcopy(base)
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.001),
                                 named_parameters=[('%s.%s' % (label, n), q) for n, q in m.named_parameters()],
                                 priorities=prio, overlap_forward=m if overlap else None)
    runs[label] = (m, o)


def timed(model, opt):
    t = median_step_seconds(model, opt, data, args.steps, 5, hvd.barrier)
    return hvd.allreduce(torch.tensor([t]), op=hvd.Max, name='prio.step.time').item() * 1e3


if rank == 0:
    print('# priority_step np=%d layers=%d params=%d batch=%d' % (size, args.layers, nparams, args.batch))
    print('# round  ' + '  '.join('%s_ms' % k for k, _, _ in MODES) + '  (ratios to off)')
ratios = {k: [] for k, _, _ in MODES}
for r in range(args.rounds):
    order = [k for k, _, _ in MODES]
    order = order[r % len(order):] + order[:r % len(order)]  # rotate: every mode runs in every position
    res = {k: timed(*runs[k]) for k in order}
    for k in res:
        ratios[k].append(res[k] / res['off'])
    if rank == 0:
        print('  %d  ' % r + '  '.join('%.3f (%.3f)' % (res[k], res[k] / res['off']) for k, _, _ in MODES), flush=True)
# Every mode trained on the same data from the same weights: same parameters
# (the deferred ones applied first).
for _, o in runs.values():
    o.state_dict()
flat = {k: torch.cat([q.detach().flatten() for q in runs[k][0].parameters()]) for k in runs}
if rank == 0:
    print('# median ratio to off: ' + ', '.join('%s %.3f' % (k, statistics.median(v)) for k, v in ratios.items()))
    print('# max |param difference| to off: ' + ', '.join('%s %.2e' % (k, (flat[k] - flat['off']).abs().max().item())
                                                        for k in flat))
hvd.shutdown()
