"""Where an hvd.torch small op spends its time (issue 18): the synchronous
8-byte allreduce peeled layer by layer, and the 200 x 4 KiB async batch's
per-op Python costs. Run under hvdrun at np 2 (bench/python/torch_phases.sh);
rows are interleaved within each pass so that load changes hit them alike,
and each figure is the median over passes of the slowest rank's mean.

Rows (8 B, float32 x 2, op Sum, one name per row):
  full            hvd.allreduce(t, op=Sum, name=...): autograd Function,
                  compression, checks, output allocation, the library call
  inplace         hvd.allreduce_(t, ...)
  collectives     hvd.torch.tensors.collectives._allreduce_sync (no autograd
                  or compression)
  abi             hvd.common._abi.allreduce with described arguments (the
                  generated ctypes wrapper: shape array, name, error buffer)
  ctypes          lib.hvd_allreduce with every argument prepared (one ctypes
                  call: cgo transition, GIL release, engine and wake-up)
  async+wait      lib.hvd_allreduce_async + hvd_wait + hvd_release, prepared
                  (the handle path: three calls)
Local rows (no peers; each rank alone):
  py:full, py:inplace, py:collectives  the same with the library call
                  replaced by a Python no-op (wrapper work only)
  ctypes:rank     lib.hvd_rank() (one ctypes round trip into Go, 0 args)
  ctypes:13args   lib.hvd_allreduce on an unknown process set (argument
                  conversion + Go entry + error path, no engine)
Batch rows (200 x 4 KiB, allreduce_async_ then synchronize):
  batch           hvd.allreduce_async_ x 200, hvd.synchronize x 200
  batch:ctypes    the same as prepared lib.hvd_allreduce_async, hvd_wait and
                  hvd_release calls (the library's share of the batch)
  py:enqueue      the 200 enqueues with the library call a no-op (Python)
  py:sync         the 200 synchronizes with wait/release no-ops (Python)
"""
import argparse
import ctypes
import os
import resource
import statistics
import time

import torch

import hvd.torch as hvd
from hvd.common import _abi, handles
from hvd.torch.tensors import collectives as C

p = argparse.ArgumentParser()
p.add_argument('--passes', type=int, default=7)
p.add_argument('--k', type=int, default=200, help='ops per sample for the 8 B rows')
p.add_argument('--only', default='', help='comma-separated row names (default all)')
args = p.parse_args()
torch.set_num_threads(1)
hvd.init()
lib = _abi._lib
small = torch.zeros(2, dtype=torch.float32)
out = torch.zeros(2, dtype=torch.float32)
ERR = ctypes.create_string_buffer(_abi.ERR_LEN)
shape = (ctypes.c_int64 * 1)(2)
SUM = hvd.Sum


def r_full():
    hvd.allreduce(small, op=SUM, name='ph.full')


def r_inplace():
    hvd.allreduce_(small, op=SUM, name='ph.inplace')


def r_coll():
    C._allreduce_sync(small, False, 'ph.coll', SUM, 1.0, 1.0, hvd.global_process_set, 0)


def r_abi():
    _abi.allreduce(small.data_ptr(), out.data_ptr(), 7, [2], SUM, 1.0, 1.0, 0, 'ph.abi', 0)


NAME_CT = b'ph.ctypes'
NAME_AW = b'ph.aw'
pin, pout = small.data_ptr(), out.data_ptr()


def r_ctypes():
    r = lib.hvd_allreduce(pin, pout, 7, shape, 1, SUM, 1.0, 1.0, 0, NAME_CT, 0, ERR, _abi.ERR_LEN)
    assert r >= 0, ERR.value


def r_aw():
    h = lib.hvd_allreduce_async(pin, pout, 7, shape, 1, SUM, 1.0, 1.0, 0, NAME_AW, 0, ERR, _abi.ERR_LEN)
    assert h >= 0, ERR.value
    assert lib.hvd_wait(h, ERR, _abi.ERR_LEN) >= 0
    lib.hvd_release(h, ERR, _abi.ERR_LEN)


def r_rank():
    lib.hvd_rank()


def r_13():
    lib.hvd_allreduce(pin, pout, 7, shape, 1, SUM, 1.0, 1.0, 12345, NAME_CT, 0, ERR, _abi.ERR_LEN)


class NoLib:
    """Stands in for _abi's library: every call returns at once."""
    h = 0

    def __getattr__(self, name):
        def f(*a):
            NoLib.h += 1
            return NoLib.h if name.endswith('_async') else 0
        return f


def local(fn):
    def run():
        saved = _abi._lib
        _abi._lib = NoLib()
        try:
            fn()
        finally:
            _abi._lib = saved
    return run


tensors = [torch.zeros(1024, dtype=torch.float32) for _ in range(200)]
names = ['ph.grad.%d' % i for i in range(200)]


def batch():
    hs = [hvd.allreduce_async_(t, op=SUM, name=n) for t, n in zip(tensors, names)]
    for h in hs:
        hvd.synchronize(h)


_pending = []
_prepared = [(t.data_ptr(), (ctypes.c_int64 * 1)(1024), n.encode()) for t, n in zip(tensors, names)]


def batch_ctypes():
    hs = []
    for ptr, shp, nm in _prepared:
        h = lib.hvd_allreduce_async(ptr, ptr, 7, shp, 1, SUM, 1.0, 1.0, 0, nm, 0, ERR, _abi.ERR_LEN)
        assert h >= 0, ERR.value
        hs.append(h)
    for h in hs:
        assert lib.hvd_wait(h, ERR, _abi.ERR_LEN) >= 0, ERR.value
        lib.hvd_release(h, ERR, _abi.ERR_LEN)


def py_enqueue():
    _pending[:] = [hvd.allreduce_async_(t, op=SUM, name=n) for t, n in zip(tensors, names)]


def py_sync():
    for h in _pending:
        hvd.synchronize(h)


ROWS = [  # name, per-sample op count, function, collective (needs the peers)
    ('full', args.k, r_full, True),
    ('inplace', args.k, r_inplace, True),
    ('collectives', args.k, r_coll, True),
    ('abi', args.k, r_abi, True),
    ('ctypes', args.k, r_ctypes, True),
    ('async+wait', args.k, r_aw, True),
    ('py:full', args.k, local(r_full), False),
    ('py:inplace', args.k, local(r_inplace), False),
    ('py:collectives', args.k, local(r_coll), False),
    ('ctypes:rank', args.k, r_rank, False),
    ('ctypes:13args', args.k, r_13, False),
    ('batch', 5, batch, True),
    ('batch:ctypes', 5, batch_ctypes, True),
]
only = [s for s in args.only.split(',') if s]
rows = [r for r in ROWS if not only or r[0] in only]
# the batch's Python halves, measured separately (enqueue then synchronize)
split_batch = not only or 'py:batch' in only


def sample(k, fn):
    hvd.barrier()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    dt = (time.perf_counter() - t0) / k * 1e6
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)) / k * 1e6
    csw = ((ru1.ru_nvcsw + ru1.ru_nivcsw) - (ru0.ru_nvcsw + ru0.ru_nivcsw)) / k
    return dt, cpu, csw


res = {r[0]: [] for r in rows}
if split_batch:
    res['py:enqueue'] = []
    res['py:sync'] = []
for _, k, fn, _ in rows:  # warm up
    for _ in range(min(k, 20)):
        fn()
for p_ in range(args.passes):
    for name, k, fn, _ in rows:
        res[name].append(sample(k, fn))
    if split_batch:
        saved = _abi._lib
        _abi._lib = NoLib()
        try:
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                py_enqueue()
                t1 = time.perf_counter()
                py_sync()
                t2 = time.perf_counter()
                ts.append((t1 - t0, t2 - t1))
        finally:
            _abi._lib = saved
        res['py:enqueue'].append((statistics.median(a for a, _ in ts) * 1e6, 0, 0))
        res['py:sync'].append((statistics.median(b for _, b in ts) * 1e6, 0, 0))

# slowest rank per pass, then the median over passes
names_sorted = list(res)
mat = torch.tensor([[v[0] for v in res[n]] for n in names_sorted], dtype=torch.float64)
mat = hvd.allreduce(mat, op=hvd.Max, name='ph.results')
if hvd.rank() == 0:
    print('# hvd.torch phases  np=%d  passes=%d  pid-load=%s' % (hvd.size(), args.passes, os.getloadavg()[0]))
    print('# %-16s %10s %10s %10s %10s %8s' % ('row', 'median us', 'min', 'max', 'cpu us', 'csw'))
    for i, n in enumerate(names_sorted):
        vals = mat[i].tolist()
        cpu = statistics.median(v[1] for v in res[n])
        csw = statistics.median(v[2] for v in res[n])
        med = statistics.median(vals)
        print('  %-16s %10.2f %10.2f %10.2f %10.2f %8.2f' % (n, med, min(vals), max(vals), cpu, csw), flush=True)
hvd.shutdown()
