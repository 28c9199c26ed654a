"""init, shutdown and the topology and capability queries
(horovod.common.basics), on libhvd.so, and Horovod's HorovodBasics object.

The topology queries live in state (process_sets needs them too); this
module re-exports them under Horovod's names.
"""
import atexit

from hvd.common import _abi, loader, setspecs, state
from hvd.common.process_sets import (ProcessSet, init_process_sets, register_static, registered, remove_id,
                                     shutdown_process_sets)
from hvd.common.state import (cross_rank, cross_size, is_homogeneous, is_initialized, local_rank,  # noqa: F401
                              local_size, rank, size)


def init(comm=None, process_sets=None):
    """Joins the job, as horovod's hvd.init().

    comm: None (the whole job). hvd does not use MPI: an mpi4py communicator
    raises ValueError (as Horovod built without MPI does), and a list of ranks
    (a subset of MPI_COMM_WORLD in Horovod) raises NotImplementedError unless
    it names every rank.
    process_sets: None; a list of ProcessSet (registered with ids 1, 2, ...
    in order; every rank must pass the same list; ProcessSet(callable) gives
    the ranks as a function of the world size); or "dynamic" (enables
    add_process_set/remove_process_set, as HOROVOD_DYNAMIC_PROCESS_SETS=1).
    In an elastic worker (HOROVOD_ELASTIC=1) init joins the world the driver
    assigns, and the first init's process sets and mode hold for every
    later world (docs/elastic.md).
    Calling init again while initialized registers nothing new; ProcessSet
    objects passed again are mapped to the registered sets with their ranks.
    """
    if loader.forked():
        raise RuntimeError('hvd: init() in a forked child process; call it in the parent')
    dynamic = False
    if isinstance(process_sets, str):
        if process_sets.lower() != 'dynamic':
            raise ValueError('process_sets must be None, a list of ProcessSet, or "dynamic"; got %r' % process_sets)
        dynamic, process_sets = True, None
    sets = list(process_sets or [])
    for i, s in enumerate(sets):
        if not isinstance(s, ProcessSet):
            raise ValueError('process_sets[%d] is %r, not a ProcessSet' % (i, s))
        if s.mpi_comm is not None:
            raise ValueError('process_sets[%d] is built from an MPI communicator; hvd is not built with MPI' % i)
    if comm is not None and not isinstance(comm, (list, tuple)):
        raise ValueError('hvd.init(comm=%r): mpi4py communicators need an MPI build; hvd does not use MPI' % (comm,))
    lib = state.lib()
    fresh = not lib.is_initialized()
    if fresh:
        flat, sizes, tokens = [], [], []
        for s in sets:
            if s.spec is not None:
                sizes.append(0)
                tokens.append(setspecs.token(s.spec))
            else:
                flat.extend(s.ranks)
                sizes.append(len(s.ranks))
                tokens.append(0)
        setspecs.call(lib.init, flat, sizes, tokens, dynamic)
        atexit.register(shutdown)
    topology = {
        'rank': lib.rank(), 'size': lib.size(), 'local_rank': lib.local_rank(), 'local_size': lib.local_size(),
        'cross_rank': lib.cross_rank(), 'cross_size': lib.cross_size(), 'is_homogeneous': lib.is_homogeneous() == 1,
    }
    state.set_topology(topology)
    if comm:
        if sorted(comm) != list(range(topology['size'])):
            raise NotImplementedError(
                'hvd.init(comm=%r): selecting a subset of ranks needs MPI, which hvd does not use; start only '
                'the ranks you need (hvdrun -np N)' % (list(comm),))
    if fresh:
        register_static(sets)
    else:
        init_process_sets(sets)


def shutdown():
    """Leaves the job; pending ops fail with HorovodInternalError. A no-op
    when not initialized (and in a forked child)."""
    if loader.forked() or loader.loaded() is None:
        return
    state.set_topology(None)
    shutdown_process_sets()
    _abi.shutdown()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a timeline to file_path (needs HOROVOD_TIMELINE=DYNAMIC)."""
    state.lib().start_timeline(file_path, mark_cycles)


def stop_timeline():
    """Stops the timeline started with start_timeline."""
    state.lib().stop_timeline()


# Capabilities, answered truthfully: hvd's data plane is its own (shared
# memory and TCP, in Go); it is not MPI, Gloo, NCCL, DDL or oneCCL, and has
# no GPU support.
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    raise ValueError('Horovod MPI is not enabled: hvd does not use MPI.')


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


# The functions HorovodBasics answers as methods.
_FUNCTIONS = frozenset((
    'init', 'shutdown', 'is_initialized', 'size', 'rank', 'local_size', 'local_rank', 'cross_size', 'cross_rank',
    'is_homogeneous', 'start_timeline', 'stop_timeline', 'mpi_built', 'mpi_enabled', 'mpi_threads_supported',
    'gloo_built', 'gloo_enabled', 'nccl_built', 'ddl_built', 'ccl_built', 'cuda_built', 'rocm_built',
))


class HorovodBasics:
    """Horovod's HorovodBasics object (``hvd.mpi_ops._basics``): the
    functions above as methods, plus the private process-set helpers that
    Horovod's own tests call."""

    from hvd.common.ops import Average, Sum, Adasum, Min, Max, Product  # noqa: F401

    def __getattr__(self, name):
        # init, shutdown, size, rank, ..., rocm_built: this module's functions.
        if name not in _FUNCTIONS:
            raise AttributeError(name)
        return globals()[name]

    def _get_process_set_ids_and_ranks(self):
        """{process set id: sorted global ranks} of every registered set."""
        state.require_init()
        return registered()

    def _process_set_rank(self, process_set_id):
        """This process's rank inside the set; ValueError when it is not a
        member or the set is unknown."""
        assert isinstance(process_set_id, int)
        ranks = self._ranks_of(process_set_id)
        r = rank()
        if r not in ranks:
            raise ValueError('Process is not part of provided process set.')
        return ranks.index(r)

    def _process_set_size(self, process_set_id):
        assert isinstance(process_set_id, int)
        return len(self._ranks_of(process_set_id))

    def _ranks_of(self, process_set_id):
        state.require_init()
        if process_set_id not in _abi.process_set_ids():
            raise ValueError('Process set does not exist or has not been registered.')
        return list(_abi.process_set_ranks(process_set_id))

    def _add_process_set_impl(self, ranks):
        """Registers a set (dynamic mode) and returns its id; None when a
        set with these ranks exists already (as Horovod)."""
        state.require_init()
        ranks = sorted(int(r) for r in ranks)
        if ranks in self._get_process_set_ids_and_ranks().values():
            return None
        return _abi.add_process_set(ranks)

    def _remove_process_set_impl(self, process_set_id):
        """Removes a set (dynamic mode); returns its id, or None for the
        global set or an unknown id."""
        assert isinstance(process_set_id, int)
        if process_set_id == 0:
            return None
        state.require_init()
        return process_set_id if remove_id(process_set_id) else None

    def _comm_process_set_id(self, comm):
        raise ValueError('Horovod has not been built with MPI support: hvd does not use MPI, so process sets '
                         'cannot be looked up by MPI communicator.')
