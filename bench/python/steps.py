"""The training-step timing the step benchmarks share (step_time.py,
priority_step.py, compression_step.py): one cross-entropy step, and the
median of timed steps after a warm-up and a barrier."""
import statistics
import time

import torch.nn.functional as F


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
