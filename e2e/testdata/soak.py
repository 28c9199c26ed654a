"""Soak: mixed collectives, dynamic process-set churn and broadcast_object
for a fixed time, every result checked, and this rank's memory, file
descriptors and threads measured after a warm-up (a quarter of the run),
halfway ("SOAK-MID" printed there, where the test samples hvdrun too) and
at the end. Run under
hvdrun -np 3 by e2e/hardening_test.go TestSoak:

    soak.py SECONDS

Prints "SOAK <json>" per rank at the end."""
import json
import os
import sys
import time

import numpy as np

import hvd.numpy as hvd


def usage():
    st = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)
    return {'rss_kb': int(st['VmRSS'].split()[0]), 'threads': int(st['Threads']),
            'fds': len(os.listdir('/proc/self/fd'))}


hvd.init(process_sets='dynamic')
r, n = hvd.rank(), hvd.size()
seconds = float(sys.argv[1])
start = time.time()
warm = None
mid = None
it = 0
while True:
    # Rank 0 decides when to stop (every rank makes the same calls).
    go = hvd.broadcast(np.array([time.time() - start < seconds], np.int32), 0, name='soak.go')[0]
    if not go:
        break
    k = it % 7
    x = np.full(1 + 1000 * k, r + 1, np.float32)
    s = hvd.allreduce(x, op=hvd.Sum, name='soak.ar.%d' % k)
    assert np.all(s == n * (n + 1) / 2), s[:4]
    g = hvd.allgather(np.full((r + 1, 3), r, np.int64), name='soak.ag')
    assert g.shape == (n * (n + 1) // 2, 3) and g[-1, 0] == n - 1
    obj = hvd.broadcast_object({'it': it, 'blob': 'x' * (it % 100)} if r == 1 else None, root_rank=1, name='soak.obj')
    assert obj == {'it': it, 'blob': 'x' * (it % 100)}, obj
    a = hvd.alltoall(np.arange(2 * n, dtype=np.float64) + 100 * r, name='soak.a2a')
    assert a.tolist() == [v for p in range(n) for v in (100 * p + 2 * r, 100 * p + 2 * r + 1)], a
    rs = hvd.reducescatter(np.ones((n * 2, 2), np.float32), op=hvd.Sum, name='soak.rs')
    assert rs.shape == (2, 2) and np.all(rs == n)
    if it % 3 == 0:  # dynamic set churn: a set that excludes rank 1
        ps = hvd.add_process_set([0, n - 1])
        if r in ps.ranks:
            y = hvd.allreduce(np.ones(5), op=hvd.Sum, process_set=ps, name='soak.ps')
            assert np.all(y == 2)
        assert hvd.remove_process_set(ps)
    it += 1
    if warm is None and time.time() - start > seconds / 4:
        warm = usage()
        warm['it'] = it
        print('SOAK-WARM', flush=True)
    if not mid and time.time() - start > seconds / 2:
        mid = usage()
        mid['it'] = it
        print('SOAK-MID', flush=True)  # hvdrun is sampled here too
end = usage()
end['it'] = it
print('SOAK ' + json.dumps({'rank': r, 'warm': warm, 'mid': mid, 'end': end}), flush=True)
hvd.shutdown()
