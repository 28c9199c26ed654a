"""Training step time of the same model on the same data with hvd.torch's
DistributedOptimizer and with torch DistributedDataParallel (gloo), in the
same processes, alternating rounds so that both see the same machine state.
Run under hvdrun (see run.sh); prints the median step time per round.

--per-tensor adds a third optimizer in the same processes: hvd's with
bucket_bytes=0 (each gradient launched from its hook, as before issue 27).
--impl horovod runs real Horovod's DistributedOptimizer instead of hvd's,
under horovodrun (bench/python/step_vs_horovod.sh).

--local adds the same step without communication (a plain optimizer on a
copy of the model, each rank on its own data): the floor no distributed
optimizer's step can go below on this machine."""
import argparse
import copy
import statistics

import torch
import torch.distributed as dist

from steps import init_beside_ddp, median_step_seconds, mlp, mlp_batches

p = argparse.ArgumentParser()
p.add_argument('--hidden', type=int, default=64, help='64: the example model; 1024: ~1.1M parameters')
p.add_argument('--steps', type=int, default=200)
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--batch', type=int, default=64)
p.add_argument('--per-tensor', action='store_true', help="also hvd's optimizer with bucket_bytes=0")
p.add_argument('--local', action='store_true', help='also the step without communication (the floor)')
p.add_argument('--impl', choices=('hvd', 'horovod'), default='hvd')
p.add_argument('--model', choices=('mlp', 'resnet18'), default='mlp',
               help="resnet18: torchvision's (python3-torchvision), 10 classes, --image-size images, as Horovod's "
                    "synthetic benchmark; DDP without broadcast_buffers, as hvd and Horovod keep BN buffers local")
p.add_argument('--image-size', type=int, default=32)
args = p.parse_args()

if args.impl == 'horovod':
    import horovod.torch as hvd
else:
    import hvd.torch as hvd
rank, size = init_beside_ddp(hvd, 29533)

torch.manual_seed(0)
if args.model == 'resnet18':
    import torchvision
    g = torch.Generator().manual_seed(rank)
    base = torchvision.models.resnet18(num_classes=10)
    data = [(torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g),
             torch.randint(0, 10, (args.batch,), generator=g)) for _ in range(4)]
else:
    base = mlp(args.hidden)
    data = mlp_batches(rank, args.batch)
nparams = sum(p.numel() for p in base.parameters())

m_hvd = copy.deepcopy(base)
o_hvd = hvd.DistributedOptimizer(torch.optim.SGD(m_hvd.parameters(), lr=0.01), named_parameters=m_hvd.named_parameters())
if args.per_tensor:
    m_pt = copy.deepcopy(base)
    o_pt = hvd.DistributedOptimizer(torch.optim.SGD(m_pt.parameters(), lr=0.01), named_parameters=m_pt.named_parameters(),
                                    bucket_bytes=0)
if args.local:
    m_loc = copy.deepcopy(base)
    o_loc = torch.optim.SGD(m_loc.parameters(), lr=0.01)
m_ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base), broadcast_buffers=False)
o_ddp = torch.optim.SGD(m_ddp.parameters(), lr=0.01)


def timed(model, opt):
    return median_step_seconds(model, opt, data, args.steps, 10, hvd.barrier) * 1e6


label = args.impl
res = {label: [], 'ddp': []}
if args.per_tensor:
    res['hvd-per-tensor'] = []
if args.local:
    res['local'] = []
for r in range(args.rounds):
    res[label].append(timed(m_hvd, o_hvd))
    res['ddp'].append(timed(m_ddp, o_ddp))
    if args.per_tensor:
        res['hvd-per-tensor'].append(timed(m_pt, o_pt))
    if args.local:
        res['local'].append(timed(m_loc, o_loc))
# the two models took identical steps on identical data: same parameters
same = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(m_hvd.parameters(), m_ddp.module.parameters()))
if rank == 0:
    print('# np=%d model=%s hidden=%d params=%d batch=%d steps=%d' % (size, args.model, args.hidden, nparams, args.batch,
                                                                     args.steps))
    for k in res:
        print('%s median step us per round: %s' % (k, ' '.join('%.0f' % v for v in res[k])))
    for k in res:
        if k != 'ddp':
            print('ratio %s/ddp (median of rounds): %.2f' % (k, statistics.median(res[k]) / statistics.median(res['ddp'])))
    if args.local:
        for k in res:
            if k != 'local':
                print('ratio %s/local (median of rounds): %.2f' % (k, statistics.median(res[k]) / statistics.median(res['local'])))
    print('samples/s (all ranks, median of rounds): %s' % ' '.join(
        '%s %.0f' % (k, args.batch * size / (statistics.median(v) * 1e-6)) for k, v in res.items()))
    print('%s and ddp parameters equal after training: %s' % (label, same))
dist.destroy_process_group()
hvd.shutdown()
