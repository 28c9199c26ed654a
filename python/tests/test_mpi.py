"""hvd.torch started by mpirun, with mpi4py (e2e/mpi_test.go runs it with
np 2 and 3: mpirun ... python3 -m pytest python/tests/test_mpi.py, with
HVD_TEST_NO_INIT=1 and no store variable). The tests run in file order and
each one initializes and shuts hvd down itself: the world from the MPI
bootstrap, Horovod's duplicate rules for sets from communicators and rank
lists, the world from a sub-communicator and from a rank list, and every
collective on each set."""
import os

import pytest
import torch

import hvd.torch as hvd

MPI = pytest.importorskip('mpi4py.MPI', reason='mpi4py (apt-get install python3-mpi4py; .ci/setup.d/10-mpi.sh)')
WORLD = MPI.COMM_WORLD
N, R = WORLD.size, WORLD.rank


@pytest.fixture(autouse=True)
def _shutdown_after():
    assert not hvd.is_initialized()
    yield
    WORLD.barrier()  # nobody shuts down while a peer still runs a collective
    hvd.shutdown()


def check_collectives(ps, members):
    """Every collective on process set ps (whose global ranks are members)
    through hvd.torch, with results computed from the members' ranks."""
    if hvd.rank() not in members:
        with pytest.raises(ValueError):
            hvd.allreduce(torch.ones(1), process_set=ps)
        return
    n, me = len(members), members.index(hvd.rank())
    tag = 'ps%d' % ps.process_set_id
    x = torch.arange(6, dtype=torch.float32) + hvd.rank()
    s = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name=tag + '.sum')
    assert torch.equal(s, torch.arange(6, dtype=torch.float32) * n + sum(members))
    a = hvd.allreduce(x, process_set=ps, name=tag + '.avg')
    assert torch.allclose(a, torch.arange(6, dtype=torch.float32) + sum(members) / n)
    g = hvd.allgather(torch.full((me + 1, 2), float(hvd.rank())), process_set=ps, name=tag + '.ag')
    want = torch.cat([torch.full((i + 1, 2), float(r)) for i, r in enumerate(members)])
    assert torch.equal(g, want)
    root = members[-1]
    b = hvd.broadcast(torch.full((3,), float(hvd.rank())), root_rank=root, process_set=ps, name=tag + '.bc')
    assert torch.equal(b, torch.full((3,), float(root)))
    t = hvd.alltoall(torch.full((n,), float(hvd.rank())), process_set=ps, name=tag + '.a2a')
    assert torch.equal(t, torch.tensor([float(r) for r in members]))
    rows = torch.ones(2 * n + 1, 3) * (hvd.rank() + 1)
    rs = hvd.reducescatter(rows, op=hvd.Sum, process_set=ps, name=tag + '.rs')
    mine = (2 * n + 1) // n + (1 if me < (2 * n + 1) % n else 0)
    assert torch.equal(rs, torch.ones(mine, 3) * sum(r + 1 for r in members))
    hvd.barrier(process_set=ps)


def test_world_from_mpirun_alone():
    # mpirun set no store variable: hvd.init bootstraps through mpi4py.
    assert not any(os.environ.get(v) for v in ('MASTER_ADDR', 'HOROVOD_GLOO_RENDEZVOUS_ADDR', 'HOROVOD_RANK'))
    hvd.init()
    assert (hvd.rank(), hvd.size()) == (R, N)
    assert (hvd.local_rank(), hvd.local_size()) == (R, N)  # one host
    # The variables the library started with are gone again.
    assert not any(os.environ.get(v) for v in ('HVD_MPI_STORE_ADDR', 'HVD_MPI_RANK', 'HVD_SECRET_KEY'))
    assert hvd.global_process_set.mpi_comm is WORLD
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(N))}
    check_collectives(hvd.global_process_set, list(range(N)))


def test_sets_from_communicators_duplicates_then_valid():
    # Horovod's test_process_sets_multi_comm, through hvd.torch.
    comm = WORLD
    sub = WORLD.Split(color=R % 2, key=R)
    comm_clone, sub_clone = comm.Dup(), sub.Dup()
    evens = hvd.ProcessSet(range(0, N, 2))  # the same ranks as sub on even ranks
    attempts = [
        [hvd.ProcessSet(sub), hvd.ProcessSet(comm_clone), hvd.ProcessSet(sub_clone), evens, hvd.ProcessSet([0])],
        [hvd.ProcessSet(sub), hvd.ProcessSet(comm_clone), evens, hvd.ProcessSet([0])],
        [hvd.ProcessSet(sub), hvd.ProcessSet(comm_clone), hvd.ProcessSet([0])],
    ]
    for sets in attempts:
        with pytest.raises(ValueError, match='duplicate'):
            hvd.init(comm=comm, process_sets=sets)
    # Internally hvd started with the distinct sets of the first call.
    sets = [hvd.ProcessSet(sub), evens, hvd.ProcessSet([0])]
    if N == 2 or R % 2 == 0:
        with pytest.raises(ValueError, match='duplicate'):
            hvd.init(comm=comm, process_sets=sets)
    else:
        hvd.init(comm=comm, process_sets=sets)
    sets = [hvd.ProcessSet(sub), hvd.ProcessSet([0])] if N > 2 else [hvd.ProcessSet(sub)]
    hvd.init(comm=comm, process_sets=sets)
    want = {0: list(range(N)), 1: list(range(0, N, 2)), 2: list(range(1, N, 2))}
    if N > 2:
        want[3] = [0]
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == want
    assert hvd.global_process_set.process_set_id == 0
    assert hvd.global_process_set.ranks == list(range(N))
    assert hvd.global_process_set.mpi_comm is comm
    assert sets[0].process_set_id == (1 if R % 2 == 0 else 2)
    assert sets[0].mpi_comm is sub and sets[0].ranks == want[sets[0].process_set_id]
    assert hvd.mpi_ops._basics._comm_process_set_id(comm) == 0
    assert hvd.mpi_ops._basics.comm_process_set_id(comm_clone) == 0
    assert hvd.mpi_ops._basics._comm_process_set_id(sub_clone) == sets[0].process_set_id
    check_collectives(hvd.global_process_set, list(range(N)))
    # The other parity's set, as a ProcessSet of ranks mapped by a further init.
    other = hvd.ProcessSet(want[2] if R % 2 == 0 else want[1])
    hvd.init(comm=comm, process_sets=[other])
    for ps in sorted([sets[0], other], key=lambda p: p.process_set_id):
        check_collectives(ps, ps.ranks)
    for c in (sub, comm_clone, sub_clone):
        c.Free()


def test_sets_from_rank_lists_duplicates_then_valid():
    # Horovod's test_process_sets_static: rank lists, no communicator.
    first = [hvd.ProcessSet([0]), hvd.ProcessSet(range(1, N)), hvd.ProcessSet(range(N - 1, -1, -1)),
             hvd.ProcessSet([0])]
    with pytest.raises(ValueError, match='duplicate'):
        hvd.init(process_sets=first)
    sets = [hvd.ProcessSet([0]), hvd.ProcessSet(reversed(range(1, N)))]
    hvd.init(process_sets=sets)
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(N)), 1: [0], 2: list(range(1, N))}
    assert [s.process_set_id for s in sets] == [1, 2]
    assert sets[0].mpi_comm is None
    check_collectives(sets[1], list(range(1, N)))


def test_world_from_a_sub_communicator():
    # World rank 0 stays out: the store is served by the sub-communicator's
    # rank 0 (world rank 1), and rank 0 is told it is not a member.
    sub = WORLD.Create_group(WORLD.Get_group().Excl([0])) if R != 0 else None
    if R == 0:
        with pytest.raises(ValueError, match='COMM_NULL'):
            hvd.init(comm=MPI.COMM_NULL)
        assert not hvd.is_initialized()
        return
    hvd.init(comm=sub)
    assert (hvd.rank(), hvd.size()) == (R - 1, N - 1)
    assert hvd.global_process_set.mpi_comm is sub
    members = list(range(N - 1))
    s = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, name='sub.sum')
    assert s.item() == sum(range(1, N))
    check_collectives(hvd.global_process_set, members)


def test_world_from_a_rank_list():
    # hvd.init(comm=[ranks]): the world is those MPI_COMM_WORLD ranks in the
    # list's order; a rank outside it is told so.
    ranks = [N - 1, 0]
    if R not in ranks:
        with pytest.raises(ValueError, match='not one of the ranks'):
            hvd.init(comm=ranks)
        return
    hvd.init(comm=ranks)
    assert (hvd.rank(), hvd.size()) == (ranks.index(R), 2)
    s = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, name='list.sum')
    assert s.item() == float(N - 1)


def test_capabilities_of_this_build():
    # Last: with HOROVOD_TIMELINE set, e2e reads which data plane ran this
    # allreduce (MPI_ALLREDUCE under HVD_BACKEND=mpi in the MPI build).
    hvd.init()
    lib_mpi = os.environ.get('HVD_TEST_MPI_BUILD') == '1'
    assert hvd.mpi_built() is lib_mpi
    assert hvd.mpi_enabled() is (lib_mpi and os.environ.get('HVD_BACKEND') == 'mpi')
    if hvd.mpi_enabled():
        assert hvd.mpi_threads_supported() is True
    else:
        with pytest.raises(ValueError):
            hvd.mpi_threads_supported()
    s = hvd.allreduce(torch.ones(3) * R, op=hvd.Sum, name='capabilities.sum')
    assert torch.equal(s, torch.ones(3) * sum(range(N)))
