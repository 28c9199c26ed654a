"""DistributedOptimizer step time and bytes on the wire per compression
(issue 18): none, fp16, bf16, top-k 1 % with error feedback, the
adaptive default policy and the measured policy (after its measured steps), on an MLP with layers from 1 k to 4 M parameters,
the same data and weights, alternating rounds in the same processes.
Bytes are what this rank hands the collectives per step (dense: elements ×
wire element size; top-k: k × (4-byte index + value)). Run under hvdrun:

    bin/hvdrun -np 2 /usr/bin/python3 bench/python/compression_step.py
"""
import argparse
import copy
import statistics

import torch

import hvd.torch as hvd
from steps import median_step_seconds
from hvd.torch.compression import select

p = argparse.ArgumentParser()
p.add_argument('--steps', type=int, default=20)
p.add_argument('--rounds', type=int, default=3)
args = p.parse_args()
torch.set_num_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()
torch.manual_seed(0)
base = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                           torch.nn.Linear(2048, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
nparams = sum(q.numel() for q in base.parameters())
g = torch.Generator().manual_seed(rank)
data = [(torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(4)]
C = hvd.Compression
variants = [('none', C.none), ('fp16', C.fp16), ('bf16', C.bf16), ('topk1%', C.topk(0.01)), ('adaptive', C.adaptive()),
            ('measured', C.measured())]
runs = {}
for label, comp in variants:
    m = copy.deepcopy(base)
    named = [('%s.%s' % (label, n), q) for n, q in m.named_parameters()]
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01), named_parameters=named, compression=comp)
    runs[label] = (m, o, named)


def wire_bytes(comp, named):
    """Bytes per step once the policy has decided (measured: after its
    measured steps, which the warm-up of the first round covers)."""
    wire = 0
    for n, q in named:
        c = select(comp, n, q)
        if getattr(c, 'sparse', False):
            wire += c.wire_bytes(q)
        else:
            wire += q.numel() * c.compress(torch.zeros(1, dtype=q.dtype))[0].element_size()
    return wire


def timed(model, opt):
    t = median_step_seconds(model, opt, data, args.steps, 3, hvd.barrier)
    return hvd.allreduce(torch.tensor([t]), op=hvd.Max, name='cmp.bench.t').item() * 1e3


res = {k: [] for k, _ in variants}
for r in range(args.rounds):
    order = [k for k, _ in variants]
    if r % 2:
        order.reverse()
    for k in order:
        res[k].append(timed(*runs[k][:2]))
wires = {k: wire_bytes(comp, runs[k][2]) for k, comp in variants}
if rank == 0:
    print('# compression_step np=%d params=%d batch=64 steps=%d rounds=%d' % (size, nparams, args.steps, args.rounds))
    print('# %-10s %14s %10s %12s %10s' % ('compression', 'bytes/step', 'vs none', 'step ms', 'vs none'))
    base_t = statistics.median(res['none'])
    for k, _ in variants:
        t = statistics.median(res[k])
        print('  %-10s %14d %10.3f %12.2f %10.3f' % (k, wires[k], wires[k] / wires['none'], t, t / base_t))
hvd.shutdown()
