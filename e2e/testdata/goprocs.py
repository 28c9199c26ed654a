"""The Go runtime's processor count in a framework process (issue 27,
cmd/libhvd/procs.go): one processor from init on, whether collectives come
in bursts separated by long computation or close together; and always
GOMAXPROCS when the user sets it (here when argv[1] is not '-': from Python, before init, which only
the live environment sees). Run with GODEBUG=schedtrace=N: the test reads
the runtime's own 'gomaxprocs=' lines printed before each 'mark' line.

The runtime writes its traces to fd 2 and hvdrun reads stdout and stderr
through separate pipes, so lines of the two streams may arrive out of order
on a loaded machine (a CI run saw a mark before every trace line that
preceded it). Both go through one pipe here: fd 2 is made a copy of fd 1
before the runtime is loaded, and each mark is one write."""
import os
import sys
import time

os.dup2(1, 2)

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
    sys.stdout.flush()
    os.write(1, b'mark %s rank %d\n' % (what.encode(), hvd.rank()))


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
