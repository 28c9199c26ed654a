"""Times in-place allreduces (Sum, float32) through hvd.torch, with the same
sizes, names and iteration counts as goallreduce (the Go SDK), to show the
cost of the Python binding. Run under hvdrun (see run.sh)."""
import sys
import time

import torch

import hvd.torch as hvd

sizes = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else
                          '8,64,512,4096,32768,262144,2097152,16777216,67108864').split(',')]
torch.set_num_threads(1)
hvd.init()
if hvd.rank() == 0:
    print('# api=python size_bytes time_us')
for size in sizes:
    t = torch.zeros(size // 4, dtype=torch.float32)
    iters = max(5, min(2000, (64 << 20) // max(size, 1) // 4))
    name = 'sweep.%d' % size
    for _ in range(3):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    start = time.perf_counter()
    for _ in range(iters):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    el = time.perf_counter() - start
    if hvd.rank() == 0:
        print('python %d %.2f' % (size, el / iters * 1e6), flush=True)
hvd.shutdown()
