"""Small-op latency through hvd.torch (issue 18): a named 8-byte synchronous
allreduce (hvd.allreduce, a new tensor) and in place (allreduce_), and 200
tensors of 4 KiB enqueued with allreduce_async_ then synchronized. Median of
samples, the slowest rank's. Run under hvdrun (bench/engine/run.sh)."""
import argparse
import resource
import statistics
import time

import torch

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument('--samples', type=int, default=15)
p.add_argument('--priority', action='store_true', help='pass priority= (when the API has it)')
args = p.parse_args()
torch.set_num_threads(1)
hvd.init()


def measure(label, k, f):
    for _ in range(3):
        f()
    times = []
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.samples):
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            f()
        times.append((time.perf_counter() - t0) / k * 1e6)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    nops = k * args.samples
    cpu = ((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)) / nops * 1e6
    csw = ((ru1.ru_nvcsw + ru1.ru_nivcsw) - (ru0.ru_nvcsw + ru0.ru_nivcsw)) / nops
    t = torch.tensor(times, dtype=torch.float64)
    t = hvd.allreduce(t, op=hvd.Max, name='latency.times')
    med = statistics.median(t.tolist())
    if hvd.rank() == 0:
        print('  %-34s %12.2f %12.2f %12.2f %10.2f %8.2f' % (label, med, min(t.tolist()), max(t.tolist()), cpu, csw),
              flush=True)


if hvd.rank() == 0:
    print('# hvd.torch latency  np=%d' % hvd.size())
    print('# %-34s %12s %12s %12s %10s %8s' % ('row', 'time (us)', 'min', 'max', 'cpu us/op', 'csw/op'))
small = torch.zeros(2, dtype=torch.float32)
measure('torch allreduce 8 B (sync, named)', 200, lambda: hvd.allreduce(small, op=hvd.Sum, name='lat'))
measure('torch allreduce_ 8 B (in place)', 200, lambda: hvd.allreduce_(small, op=hvd.Sum, name='lat_'))
tensors = [torch.zeros(1024, dtype=torch.float32) for _ in range(200)]
names = ['grad.%d' % i for i in range(200)]


def batch():
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
    for h in hs:
        hvd.synchronize(h)


measure('torch 200 x 4 KiB async batch', 5, batch)
hvd.shutdown()
