"""What the job's metrics cost a training step (issue 28, docs/performance.md):
the same model, data and DistributedOptimizer steps with metrics off and on,
in the same processes, alternating rounds (hvd.init with
HVD_METRICS_PUBLISH=0 or 1, then hvd.shutdown), so that both see the same
machine state. Run under `hvdrun --metrics-port PORT` (which serves and
polls the ranks' snapshots every second) with a scraper running (run.sh's
metrics section); prints the median step time per round and the ratio."""
import argparse
import os
import statistics

import torch

import hvd.torch as hvd
from steps import median_step_seconds

p = argparse.ArgumentParser()
p.add_argument('--hidden', type=int, default=1024, help='64: the example model; 1024: ~1.1M parameters')
p.add_argument('--steps', type=int, default=200)
p.add_argument('--rounds', type=int, default=4)
p.add_argument('--batch', type=int, default=64)
args = p.parse_args()

torch.set_num_threads(1)


def round_us(metrics):
    os.environ['HVD_METRICS_PUBLISH'] = '1' if metrics else '0'
    hvd.init()
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, args.hidden),
                                    torch.nn.ReLU(), torch.nn.Linear(args.hidden, 4))
        g = torch.Generator().manual_seed(hvd.rank())
        data = [(torch.randn(args.batch, 16, generator=g), torch.randint(0, 4, (args.batch,), generator=g)) for _ in range(16)]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters())
        return median_step_seconds(model, opt, data, args.steps, 10, hvd.barrier) * 1e6
    finally:
        hvd.shutdown()


res = {'off': [], 'on': []}
for r in range(args.rounds):
    for mode in (('off', 'on') if r % 2 == 0 else ('on', 'off')):
        res[mode].append(round_us(mode == 'on'))
if int(os.environ.get('HOROVOD_RANK', '0')) == 0:
    nparams = 16 * args.hidden + args.hidden + args.hidden * args.hidden + args.hidden + args.hidden * 4 + 4
    print('metrics cost: hidden %d (%d parameters), %d steps x %d rounds, median step time (us) per round' % (
        args.hidden, nparams, args.steps, args.rounds))
    for mode in ('off', 'on'):
        print('  metrics %-3s %s  median %.0f' % (mode, ' '.join('%.0f' % x for x in res[mode]), statistics.median(res[mode])))
    print('  on/off ratio of medians %.3f' % (statistics.median(res['on']) / statistics.median(res['off'])))
