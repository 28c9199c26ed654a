"""torch's intra-op threads after hvd.init() (hvd.torch.mpi_ops.init): cut
to the CPUs the rank may use when hvdrun bound it, untouched otherwise.
torch's own default can be 1 already (one physical core), so the pool is
set to 2 threads first, as OMP_NUM_THREADS=2 would."""
import os

import torch

import hvd.torch as hvd

torch.set_num_threads(2)
before = torch.get_num_threads()
hvd.init()
print('rank %d: threads before %d after %d cpus %d' % (hvd.rank(), before, torch.get_num_threads(),
                                                        len(os.sched_getaffinity(0))), flush=True)
hvd.shutdown()
