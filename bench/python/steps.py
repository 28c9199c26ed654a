"""What the step benchmarks share (step_time.py, step_phases.py,
zero_step.py, priority_step.py, compression_step.py): hvd and torch DDP
started side by side, the small MLP and its per-rank data, one
cross-entropy step, and the median of timed steps after a warm-up and a
barrier."""
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def init_beside_ddp(hvd, default_port):
    """hvd.init() with one compute thread per rank, then torch.distributed
    (gloo) over the same ranks on 127.0.0.1:HVD_BENCH_DDP_PORT (default
    default_port). Returns (rank, size)."""
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    port = int(os.environ.get('HVD_BENCH_DDP_PORT', str(default_port)))
    dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d' % port, rank=rank, world_size=size)
    return rank, size


def mlp(hidden):
    """The example model: 16 -> hidden -> hidden -> 4 (64: 5.5 k parameters, 1024: 1.07 M)."""
    return torch.nn.Sequential(torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 4))


def mlp_batches(rank, batch, n=16):
    """n batches (x, y) for mlp, different per rank, the same every run."""
    g = torch.Generator().manual_seed(rank)
    return [(torch.randn(batch, 16, generator=g), torch.randint(0, 4, (batch,), generator=g)) for _ in range(n)]


def train_step(model, opt, batch):
    """zero_grad, forward, cross-entropy backward, step on batch = (x, y)."""
    x, y = batch
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


def median_step_seconds(model, opt, data, steps, warmup, barrier):
    """warmup untimed steps, barrier(), then the median of steps timed steps
    (seconds), cycling through data."""
    for i in range(warmup):
        train_step(model, opt, data[i % len(data)])
    barrier()
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        train_step(model, opt, data[i % len(data)])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
