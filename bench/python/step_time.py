"""Training step time of the same model on the same data with hvd.torch's
DistributedOptimizer and with torch DistributedDataParallel (gloo), in the
same processes, alternating rounds so that both see the same machine state.
Run under hvdrun (see run.sh); prints the median step time per round."""
import argparse
import copy
import os
import statistics

import torch
import torch.distributed as dist

import hvd.torch as hvd
from steps import median_step_seconds

p = argparse.ArgumentParser()
p.add_argument('--hidden', type=int, default=64, help='64: the example model; 1024: ~1.1M parameters')
p.add_argument('--steps', type=int, default=200)
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--batch', type=int, default=64)
args = p.parse_args()

torch.set_num_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()
port = int(os.environ.get('HVD_BENCH_DDP_PORT', '29533'))
dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d' % port, rank=rank, world_size=size)

torch.manual_seed(0)
base = torch.nn.Sequential(torch.nn.Linear(16, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, args.hidden),
                           torch.nn.ReLU(), torch.nn.Linear(args.hidden, 4))
nparams = sum(p.numel() for p in base.parameters())
g = torch.Generator().manual_seed(rank)
data = [(torch.randn(args.batch, 16, generator=g), torch.randint(0, 4, (args.batch,), generator=g)) for _ in range(16)]

m_hvd = copy.deepcopy(base)
o_hvd = hvd.DistributedOptimizer(torch.optim.SGD(m_hvd.parameters(), lr=0.01), named_parameters=m_hvd.named_parameters())
m_ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base))
o_ddp = torch.optim.SGD(m_ddp.parameters(), lr=0.01)


def timed(model, opt):
    return median_step_seconds(model, opt, data, args.steps, 10, hvd.barrier) * 1e6


res = {'hvd': [], 'ddp': []}
for r in range(args.rounds):
    res['hvd'].append(timed(m_hvd, o_hvd))
    res['ddp'].append(timed(m_ddp, o_ddp))
# the two models took identical steps on identical data: same parameters
same = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(m_hvd.parameters(), m_ddp.module.parameters()))
if rank == 0:
    print('# np=%d hidden=%d params=%d batch=%d steps=%d' % (size, args.hidden, nparams, args.batch, args.steps))
    for k in ('hvd', 'ddp'):
        print('%s median step us per round: %s' % (k, ' '.join('%.0f' % v for v in res[k])))
    print('ratio hvd/ddp (median of rounds): %.2f' % (statistics.median(res['hvd']) / statistics.median(res['ddp'])))
    print('hvd and ddp parameters equal after training: %s' % same)
dist.destroy_process_group()
hvd.shutdown()
