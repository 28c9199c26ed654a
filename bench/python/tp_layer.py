"""Forward+backward time of one transformer block (ln, causal attention,
residual, ln, GELU MLP, residual) unsplit in one process against the same
block split over T=2 ranks with hvd.torch.tensor_parallel, and the bytes its
collectives move per block. float32, one torch thread per rank.

Run it from the repository root (after `make build python`), alone on the
machine (the ranks are the cores):

    flock /tmp/hvd-bench.lock /usr/bin/python3 bench/python/tp_layer.py

It starts `bin/hvdrun -np 1` (dense and T=1 rows) and `bin/hvdrun -np 2`
(the T=2 row and the allreduces alone) with --worker, checks in each run that
the split block's output and input gradient match the dense block's (computed
by the np 1 run), and prints one table. --hidden/--heads/--ffn/--batch/--seq/--iters change the
shape (a smoke run: --hidden 64 --heads 4 --ffn 256 --batch 2 --seq 16
--iters 3).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))


class Attn(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(hidden, hidden) for _ in range(4))
        self.heads = heads

    def forward(self, x):
        b, s, h = x.shape
        hd = h // self.heads
        q, k, v = (m(x).view(b, s, self.heads, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
        att = q @ k.transpose(-2, -1) / math.sqrt(hd)
        att = att.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float('-inf')).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.fc, self.act, self.proj = nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, attn, mlp, hidden):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = nn.LayerNorm(hidden), attn, nn.LayerNorm(hidden), mlp

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def median_seconds(fn, iters, warmup=1, barrier=lambda: None):
    """(wall, cpu): the medians of iters timed calls after warmup untimed
    ones and barrier(); cpu is this process's CPU time (all its threads),
    which other work on a busy machine does not inflate as it does wall."""
    for _ in range(warmup):
        fn()
    barrier()
    wall, cpu = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def fwd_bwd(block, x, g):
    def step():
        block.zero_grad(set_to_none=True)
        x.grad = None
        y = block(x)
        (y * g).sum().backward()
        return y
    return step


def worker(a):
    import hvd.torch as hvd
    import hvd.torch.tensor_parallel as tp

    torch.set_num_threads(1)
    hvd.init()
    ps = hvd.global_process_set
    torch.manual_seed(0)
    dense = Block(Attn(a.hidden, a.heads), MLP(a.hidden, a.ffn), a.hidden)
    par = Block(tp.ParallelSelfAttention.from_dense(dense.attn, ps), tp.ParallelMLP.from_dense(dense.mlp, ps),
                a.hidden)
    par.ln1.load_state_dict(dense.ln1.state_dict())
    par.ln2.load_state_dict(dense.ln2.state_dict())
    x = torch.randn(a.batch, a.seq, a.hidden, generator=torch.Generator().manual_seed(1), requires_grad=True)
    g = torch.randn(a.batch, a.seq, a.hidden, generator=torch.Generator().manual_seed(2))

    # Check: the split block gives the dense block's output and input
    # gradient (np 1 computes them and saves them for the np 2 run).
    if hvd.size() == 1:
        want_y = fwd_bwd(dense, x, g)().detach()
        torch.save((want_y, x.grad.clone()), a.reference)
    want_y, want_dx = torch.load(a.reference)
    tp.reset_collective_stats()
    y = fwd_bwd(par, x, g)().detach()
    stats = tp.collective_stats()
    err = max((y - want_y).abs().max().item(), (x.grad - want_dx).abs().max().item())
    if err > 1e-3:
        raise SystemExit('T=%d block differs from the dense block by %g' % (hvd.size(), err))

    rows = []
    if hvd.size() == 1:
        rows.append({'what': 'dense (one process)', 't': 1, 's': median_seconds(fwd_bwd(dense, x, g), a.iters)})
    barrier = (lambda: hvd.barrier()) if hvd.size() > 1 else (lambda: None)
    s = median_seconds(fwd_bwd(par, x, g), a.iters, barrier=barrier)
    rows.append({'what': 'tensor_parallel T=%d' % hvd.size(), 't': hvd.size(), 's': s,
                 'allreduces': stats['allreduce'][0], 'bytes': stats['allreduce'][1] + stats['allgather'][1],
                 'err': err})
    if hvd.size() > 1:  # the block's allreduces alone, same sizes and count
        buf = torch.zeros(a.batch, a.seq, a.hidden)

        def comm():
            for _ in range(stats['allreduce'][0]):
                hvd.allreduce(buf, op=hvd.Sum, process_set=ps)
        rows.append({'what': '  its %d allreduces alone' % stats['allreduce'][0], 't': hvd.size(),
                     's': median_seconds(comm, a.iters, barrier=barrier)})
    if hvd.rank() == 0:
        print('TP_ROWS ' + json.dumps(rows), flush=True)
    hvd.shutdown()


def driver(a, argv):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, 'build', 'python'))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, 'dense.pt')
        for np in (1, 2):
            cmd = [os.path.join(REPO, 'bin', 'hvdrun'), '-np', str(np), sys.executable, os.path.abspath(__file__),
                   '--worker', '--reference', ref] + argv
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            lines = [ln for ln in out.stdout.splitlines() if 'TP_ROWS ' in ln]
            if out.returncode != 0 or not lines:
                sys.exit('%s failed (exit %d):\n%s' % (' '.join(cmd), out.returncode, out.stdout[-4000:]))
            rows += json.loads(lines[0].split('TP_ROWS ', 1)[1])
    wall, cpu = rows[0]['s']
    print('# transformer block fwd+bwd: hidden %d, heads %d, ffn %d, batch %d, seq %d, float32, 1 thread/rank, '
          'median of %d; cpu = CPU seconds of one rank\'s process' % (a.hidden, a.heads, a.ffn, a.batch, a.seq,
                                                                     a.iters))
    print('%-28s %3s %10s %10s %9s %9s %10s %9s %8s' % ('what', 'T', 'wall ms', 'cpu ms', 'wall x', 'cpu x',
                                                       'allreduces', 'MiB/rank', 'max err'))
    for r in rows:
        w, c = r['s']
        print('%-28s %3d %10.1f %10.1f %9.2f %9.2f %10s %9s %8s' % (
            r['what'], r['t'], w * 1e3, c * 1e3, wall / w, cpu / c if c else float('nan'), r.get('allreduces', ''),
            '%.2f' % (r['bytes'] / 2**20) if 'bytes' in r else '', '%.1e' % r['err'] if 'err' in r else ''))
    print('# wall x, cpu x: the dense row\'s time over this row\'s (speed-up); MiB/rank: payload handed to the '
          'collectives per block fwd+bwd')


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    for name, default in (('hidden', 1024), ('heads', 16), ('ffn', 4096), ('batch', 8), ('seq', 128), ('iters', 5)):
        p.add_argument('--' + name, type=int, default=default)
    p.add_argument('--worker', action='store_true', help='(internal) run as an hvdrun rank')
    p.add_argument('--reference', help='(internal) file of the dense output and input gradient')
    a = p.parse_args()
    if a.worker:
        worker(a)
    else:
        driver(a, sys.argv[1:])


if __name__ == '__main__':
    main()
