"""The Go runtime's processor count in a framework process (issue 27,
cmd/libhvd/procs.go): one processor from init on, whether collectives come
in bursts separated by long computation or close together; and always
GOMAXPROCS when the user sets it (here when argv[1] is not '-': from Python, before init, which only
the live environment sees). Run with GODEBUG=schedtrace=N: the test reads
the runtime's own 'gomaxprocs=' lines printed before each 'mark' line."""
import os
import sys
import time

import numpy as np

import hvd.numpy as hvd

if sys.argv[1] != '-':
    os.environ['GOMAXPROCS'] = sys.argv[1]
hvd.init()
n = [0]


def burst(k):
    for _ in range(k):
        n[0] += 1
        out = hvd.allreduce(np.full(256, float(hvd.rank()), dtype=np.float32), name='t%d' % n[0], op=hvd.Sum)
        assert out[0] == sum(range(hvd.size())), out[:4]


def mark(what):
    time.sleep(0.2)  # several scheduler traces
    hvd.barrier()
    print('mark %s rank %d' % (what, hvd.rank()), flush=True)


mark('init')
for _ in range(8):  # long computation between steps
    time.sleep(0.03)
    burst(2)
mark('long')
for _ in range(40):  # short steps
    time.sleep(0.002)
    burst(2)
mark('short')
hvd.shutdown()
