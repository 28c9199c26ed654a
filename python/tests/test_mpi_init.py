"""hvd under mpirun when the script left MPI's initialisation to the
library, as Horovod's own tests do (mpi4py.rc.initialize = False before
anything imports mpi4py.MPI). e2e/mpi_test.go TestMPIInitByHvd runs it
with np 2 and 3 under real mpirun, twice:

* HVD_TEST_MPI_OWNER=hvd: nobody initialises MPI; hvd.init must (with
  MPI_THREAD_MULTIPLE) and finalise it at exit, after its own shutdown.
* HVD_TEST_MPI_OWNER=script: the script initialises MPI itself (after
  importing hvd); hvd must use it and leave the finalisation to the script.

Either way the line printed at exit (by a handler registered before hvd's)
says whether MPI was finalised by then; the e2e test checks it, and that
mpirun saw no rank exit without MPI_Finalize."""
import atexit
import os

import mpi4py

mpi4py.rc.initialize = False

import pytest  # noqa: E402
import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402
from mpi4py import MPI  # noqa: E402

OWNER = os.environ.get('HVD_TEST_MPI_OWNER', 'hvd')
if OWNER == 'script':
    MPI.Init_thread(MPI.THREAD_MULTIPLE)
    atexit.register(MPI.Finalize)  # runs last
atexit.register(lambda: print('hvd-test: owner %s, MPI finalized at exit: %s' % (OWNER, MPI.Is_finalized()),
                              flush=True))


def test_hvd_init_initialises_mpi_only_when_nobody_has():
    assert MPI.Is_initialized() == (OWNER == 'script'), 'the precondition: mpi4py did not initialise MPI'
    hvd.init()
    assert MPI.Is_initialized() and not MPI.Is_finalized()
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    world = MPI.COMM_WORLD
    assert (hvd.rank(), hvd.size()) == (world.rank, world.size)
    out = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name='mpi.init.sum')
    assert out.item() == world.size * (world.size + 1) / 2
    assert world.allgather(hvd.rank()) == list(range(world.size))  # MPI itself is usable alongside hvd
    world.barrier()
    hvd.shutdown()


def test_shutdown_leaves_mpi_up_for_another_init():
    # hvd finalises MPI at exit, not at shutdown: MPI cannot be initialised
    # twice, and init after shutdown bootstraps again over MPI.
    assert MPI.Is_initialized() and not MPI.Is_finalized()
    hvd.init()
    g = hvd.allgather(torch.tensor([hvd.rank()]), name='mpi.init.again')
    assert g.tolist() == list(range(MPI.COMM_WORLD.size))
    MPI.COMM_WORLD.barrier()
    hvd.shutdown()
