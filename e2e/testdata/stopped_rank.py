"""A live but stopped rank (SIGSTOP: in real life a stuck data loader or a
swapped-out host). The last rank stops itself after a first step; the
others go on allreducing and must hear, while they wait, which rank they
wait for and on which set and tensor, then fail with an error naming it.
Run under hvdrun by e2e/hardening_test.go TestStoppedRank."""
import os
import signal
import sys
import time

import numpy as np

import hvd.numpy as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
hvd.allreduce(np.ones(4, np.float32), name='warmup')
if r == n - 1:
    # HVD_TEST_STOP_AFTER: stay alive this long first, so that the others'
    # op is already negotiated and waits at the coordinator for this rank
    # (no data-plane wait is in progress when it stops).
    time.sleep(float(os.environ.get('HVD_TEST_STOP_AFTER', '0')))
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)  # only reached if continued: the job must not need it
    sys.exit(3)
t0 = time.time()
try:
    for i in range(1000000):
        hvd.allreduce(np.ones(4, np.float32), name='step')
except Exception as e:  # HorovodInternalError
    print('rank %d failed after %.1f s: %s: %s' % (r, time.time() - t0, type(e).__name__, e), flush=True)
    sys.exit(1)
print('rank %d: no error' % r)
