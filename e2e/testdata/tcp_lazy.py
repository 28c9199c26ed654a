"""Every collective, small and large, on the global set and on sets that
exclude ranks, each result checked; e2e/tcplazy_test.go runs it under
hvdrun with HVD_BACKEND=tcp and a low HVD_TCP_FULL_MESH_MAX. Prints
"LAZY-OK rank R of N sockets S" (S: this process's open sockets)."""
import os
import numpy as np
import hvd.numpy as hvd

hvd.init(process_sets='dynamic')
r, n = hvd.rank(), hvd.size()
sets = [hvd.add_process_set([0, n - 1]), hvd.add_process_set(list(range(1, n)))]
for it in range(3):
    for size in (3, 1 << 20):
        x = np.full(size, r + 1, np.float32)
        s = hvd.allreduce(x, op=hvd.Sum, name='ar.%d' % size)
        assert np.all(s == n * (n + 1) / 2), s[:4]
        g = hvd.allgather(np.full((size // 3 + r, 1), r, np.float32), name='ag.%d' % size)
        assert g.shape[0] == n * (size // 3) + n * (n - 1) // 2 and g[-1, 0] == n - 1
        b = hvd.broadcast(np.full(size, r, np.float32), root_rank=n - 1, name='bc.%d' % size)
        assert np.all(b == n - 1)
        rs = hvd.reducescatter(np.ones((n * size, 1), np.float32), op=hvd.Sum, name='rs.%d' % size)
        assert rs.shape == (size, 1) and np.all(rs == n)
        for ps in sets:
            if r in ps.ranks:
                y = hvd.allreduce(np.full(size, r, np.float64), op=hvd.Sum, process_set=ps, name='ps%d.%d' % (ps.process_set_id, size))
                assert np.all(y == sum(ps.ranks)), (ps.ranks, y[:3])
                z = hvd.allgather(np.full((2, 2), r, np.int32), process_set=ps, name='psag%d.%d' % (ps.process_set_id, size))
                assert z[:, 0].tolist() == [q for q in ps.ranks for _ in range(2)]
    a = hvd.alltoall(np.arange(2 * n, dtype=np.float64) + 100 * r, name='a2a')
    assert a.tolist() == [v for p in range(n) for v in (100 * p + 2 * r, 100 * p + 2 * r + 1)], a
    hvd.barrier()
def _link(f):
    try:
        return os.readlink('/proc/self/fd/' + f)
    except OSError:
        return ''
socks = sum(1 for f in os.listdir('/proc/self/fd') if _link(f).startswith('socket:'))
print('LAZY-OK rank %d of %d sockets %d' % (r, n, socks), flush=True)
hvd.shutdown()
