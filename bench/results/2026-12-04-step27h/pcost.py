"""The Python-side cost of hvd.torch's 200 x 4 KiB async batch alone: the C
fast path set up with stub library functions (stub.c: enqueue returns the
next id, reap reaps every candidate), so that nothing of libhvd runs.
Rows: the public API (hvd.allreduce_async_ + hvd.synchronize: the C
entries), the Python functions they wrap (the path before this session),
and the C module's functions called directly; each with the tensor reader
(hvd/torch/_tensorinfo.cpp) and without. One process, no hvdrun. Run: cc -O2 -shared -fPIC stub.c -o /tmp/libstub.so &&
PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 pcost.py"""
import ctypes
import os
import statistics
import time

import torch

import hvd.torch as hvd
from hvd.common import handles
from hvd.torch import tensors as T

lib = ctypes.CDLL(os.environ.get('STUB', '/tmp/libstub.so'))
fp = T._fp
assert fp is not None, 'the C fast path is not built'


def addr(f):
    return ctypes.cast(f, ctypes.c_void_p).value


info = T._tensor_info()


def setup(reader):
    fp.setup(addr(lib.s_async), addr(lib.s_sync), addr(lib.s_wait), addr(lib.s_release), addr(lib.s_reap),
             handles.handle_map, handles.reaped, torch.Tensor, torch.nn.Parameter, hvd.ProcessSet, dict(T.DTYPES),
             torch.strided, tuple(T._FAST_OPS), int(hvd.Average), *(info if reader else (None, ())))


ps = hvd.global_process_set
ps.process_set_id = 0  # as if registered: the stub takes any set
tensors = [torch.zeros(1024) for _ in range(200)]
names = ['grad.%d' % i for i in range(200)]
Sum = hvd.Sum
pa, psync = hvd.allreduce_async_, hvd.synchronize
py_async, py_sync = getattr(pa, '__wrapped__', pa), getattr(psync, '__wrapped__', psync)


def api():
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
    for h in hs:
        hvd.synchronize(h)


def api_python_functions():
    hs = [py_async(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
    for h in hs:
        py_sync(h)


def direct():
    hs = [fp.allreduce(t, True, False, None, n, Sum, 1.0, 1.0, ps, 0) for t, n in zip(tensors, names)]
    for h in hs:
        fp.synchronize(h)


# Every configuration in turn, ROUNDS times (this VM's speed drifts by 2x
# within minutes): the median of each round's median of 40 batches.
rows = [(label, reader, f) for reader in (True, False)
        for label, f in (('api (C entries)', api), ('api (Python functions)', api_python_functions),
                         ('C module directly', direct))]
res = {(label, reader): [] for label, reader, _ in rows}
for _ in range(int(os.environ.get('ROUNDS', '15'))):
    for label, reader, f in rows:
        setup(reader)
        v = []
        for _ in range(45):
            t0 = time.perf_counter()
            f()
            v.append((time.perf_counter() - t0) * 1e6)
        res[(label, reader)].append(statistics.median(v[5:]))
print('# us per 200-op batch, median of rounds (min-max of round medians)')
for (label, reader), v in res.items():
    print('%-24s reader %-3s %6.0f  (%.0f-%.0f)' % (label, 'on' if reader else 'off', statistics.median(v), min(v), max(v)))
