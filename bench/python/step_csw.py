"""Context switches per training step (issue 27): the step of step_time.py's
5.5 k-parameter MLP with hvd.torch's DistributedOptimizer, 400 timed steps
after 50 warm-up ones; each rank prints its median step time and, from
getrusage, its CPU time and voluntary / involuntary context switches per
step. Run under hvdrun, the machine alone:

  bin/hvdrun -np 2 /usr/bin/python3 bench/python/step_csw.py
  HVD_CALLER_ROUNDS=1 bin/hvdrun -np 2 /usr/bin/python3 bench/python/step_csw.py
"""
import argparse
import resource
import statistics
import time

import torch

import hvd.torch as hvd
from steps import mlp, mlp_batches, train_step

p = argparse.ArgumentParser()
p.add_argument('--hidden', type=int, default=64)
p.add_argument('--steps', type=int, default=400)
args = p.parse_args()
torch.set_num_threads(1)
hvd.init()
r = hvd.rank()
torch.manual_seed(0)
model = mlp(args.hidden)
data = mlp_batches(r, 64)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

for i in range(50):
    train_step(model, opt, data[i % len(data)])
times = []
ru0 = resource.getrusage(resource.RUSAGE_SELF)
for i in range(args.steps):
    t0 = time.perf_counter()
    train_step(model, opt, data[i % len(data)])
    times.append(time.perf_counter() - t0)
ru1 = resource.getrusage(resource.RUSAGE_SELF)
n = args.steps
cpu = ((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)) / n * 1e6
print('rank %d step med %.0f us  cpu/step %.0f us  vcsw/step %.2f  ivcsw/step %.2f' % (
    r, statistics.median(times) * 1e6, cpu, (ru1.ru_nvcsw - ru0.ru_nvcsw) / n, (ru1.ru_nivcsw - ru0.ru_nivcsw) / n),
      flush=True)
hvd.shutdown()
