"""init, shutdown and the topology and capability queries
(horovod.common.basics), on libhvd.so, and Horovod's HorovodBasics object.

The topology queries live in state (process_sets needs them too); this
module re-exports them under Horovod's names.
"""
import atexit
import os

from hvd.common import _abi, loader, mpi, setspecs, state
from hvd.common.process_sets import (ProcessSet, global_process_set, init_process_sets, register_static, registered,
                                     remove_id, shutdown_process_sets)
from hvd.common.state import (cross_rank, cross_size, is_homogeneous, is_initialized, local_rank,  # noqa: F401
                              local_size, rank, size)


def init(comm=None, process_sets=None):
    """Joins the job, as horovod's hvd.init().

    comm: None (the whole job); a list of MPI_COMM_WORLD ranks (under
    mpirun: the world is those processes, in the list's order; elsewhere it
    must name every rank); or an mpi4py communicator (the world is its
    processes in its rank order; a sub-communicator makes a smaller world;
    only its members call init). docs/mpi.md.
    process_sets: None; a list of ProcessSet (registered with ids 1, 2, ...
    in order; every rank must pass the same list; ProcessSet(callable) gives
    the ranks as a function of the world size; ProcessSet(mpi_comm) stands
    for every distinct set its members' communicators make, as in Horovod);
    or "dynamic" (enables add_process_set/remove_process_set, as
    HOROVOD_DYNAMIC_PROCESS_SETS=1). A set given twice (the same ranks from
    a rank list, a communicator or a clone of it, or the global set again)
    raises ValueError after the library started with the distinct sets;
    init can then be called again with a valid list, as in Horovod.
    In an elastic worker (HOROVOD_ELASTIC=1) init joins the world the driver
    assigns, and the first init's process sets and mode hold for every
    later world (docs/elastic.md).
    Under mpirun with no store variable set, init finds rank 0's store over
    MPI with mpi4py (hvd.common.mpi).
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
    lib = state.lib()
    fresh = not lib.is_initialized()
    comm_ranks = None
    if fresh:
        world, comm_ranks = mpi.world_from(comm)
        if world is None and any(s.mpi_comm is not None for s in sets):
            if mpi.mpi_launch() < 1:
                raise ValueError('hvd.init: a ProcessSet built from an MPI communicator needs the job started by '
                                 'mpirun (or hvd.init(comm=<mpi4py communicator>)); give its ranks as a list instead')
            world = mpi.import_mpi('hvd.ProcessSet(<mpi4py communicator>)').COMM_WORLD
        _mpi_world[0] = world
    world = _mpi_world[0]
    comm_objs = [s for s in sets if s.mpi_comm is not None]
    if comm_objs and world is None:
        raise ValueError('hvd.init: a ProcessSet built from an MPI communicator needs the world to come from MPI '
                         '(the first hvd.init under mpirun, or with comm=<mpi4py communicator>)')
    if fresh:
        collected, mine = mpi.comm_sets([s.mpi_comm for s in comm_objs], world) if comm_objs else ([], [])
        for s, ranks in zip(comm_objs, mine):
            s.ranks = ranks
        boot = None
        if world is not None and (comm is not None or mpi.needs_bootstrap()):
            boot = mpi.bootstrap_env(world)
        size_hint = world.size if world is not None else _size_hint()
        reps = _distinct_sets(collected, [s for s in sets if s.mpi_comm is None], size_hint)
        flat, sizes, tokens = [], [], []
        for s in reps:
            if s.spec is not None:
                sizes.append(0)
                tokens.append(setspecs.token(s.spec))
            else:
                flat.extend(s.ranks)
                sizes.append(len(s.ranks))
                tokens.append(0)
        with mpi.environment(boot):
            setspecs.call(lib.init, flat, sizes, tokens, dynamic)
        atexit.register(shutdown)
        if world is not None:  # after shutdown: runs before it
            mpi.abort_at_exit(world, lambda: loader.peer_failures[0] if loader.peer_failures else None)
    else:
        for s in comm_objs:
            s.ranks = mpi.translate(s.mpi_comm, world)
    topology = {
        'rank': lib.rank(), 'size': lib.size(), 'local_rank': lib.local_rank(), 'local_size': lib.local_size(),
        'cross_rank': lib.cross_rank(), 'cross_size': lib.cross_size(), 'is_homogeneous': lib.is_homogeneous() == 1,
    }
    state.set_topology(topology)
    if comm and world is None and isinstance(comm, (list, tuple)):
        if sorted(comm) != list(range(topology['size'])):
            raise NotImplementedError(
                'hvd.init(comm=%r): selecting a subset of ranks needs an MPI launch (mpirun with mpi4py); start only '
                'the ranks you need (hvdrun -np N)' % (list(comm),))
    if fresh:
        register_static(reps)
    global_process_set.mpi_comm = world
    _map_sets(sets)


# The communicator hvd's world came from (None when it did not come from
# MPI), kept from the first init for later ones and ProcessSet(mpi_comm).
_mpi_world = [None]


def _size_hint():
    """The world size the launch environment gives, or None."""
    for var in ('HOROVOD_SIZE', 'WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'PMI_SIZE'):
        v = os.environ.get(var, '').strip()
        if v.isdigit():
            return int(v)
    return None


def _distinct_sets(collected, others, size):
    """What the library registers, in Horovod's order: the sets the
    communicators stand for, then the others; a set given again, or equal
    to the global set, only once (not at all). Returns ProcessSet objects:
    this process's own object for a set it passed, a new one for a set only
    other ranks' communicators make."""
    out, seen = [], set()
    if size is not None:
        seen.add(tuple(range(size)))
    for ranks in collected:
        if tuple(ranks) not in seen:
            seen.add(tuple(ranks))
            out.append(ProcessSet(ranks))
    for s in others:
        if s.spec is None:
            if tuple(s.ranks) in seen:
                continue
            seen.add(tuple(s.ranks))
        out.append(s)
    return out


def _map_sets(sets):
    """Gives every ProcessSet passed to init the id of the registered set
    with its ranks; ValueError naming the first one that repeats an earlier
    entry or the global set (its id stays None), after the others are
    mapped."""
    size = state.size()
    known = {tuple(ranks): i for i, ranks in registered().items()}
    seen = {tuple(range(size)): 'the global process set'}
    dup = None
    for i, ps in enumerate(sets):
        key = tuple(ps.ranks) if ps.spec is None else tuple(setspecs.ranks_of(ps.spec, size))
        if key in seen:
            ps.process_set_id = None
            dup = dup or (i, ps, seen[key])
            continue
        seen[key] = 'process_sets entry number %d' % i
        if ps.unregistered:
            continue  # an elastic world without it (register_static warned)
        if ps.process_set_id is None or ps.process_set_id not in known.values():
            init_process_sets([ps])
    if dup is not None:
        i, ps, first = dup
        raise ValueError('hvd could not be initialized because process_sets entry number %d is a duplicate of %s: %s; '
                         'hvd is started with the distinct sets: call hvd.init again with a list without duplicates'
                         % (i, first, ps))


def shutdown():
    """Leaves the job; pending ops fail with HorovodInternalError. A no-op
    when not initialized (and in a forked child)."""
    if loader.forked() or loader.loaded() is None:
        return
    state.set_topology(None)
    shutdown_process_sets()
    _mpi_world[0] = global_process_set.mpi_comm = None
    _abi.shutdown()


def comm_process_set_id(comm):
    """The id of the registered process set whose ranks are comm's members
    (an mpi4py communicator, translated to world ranks); ValueError when hvd's
    world did not come from MPI or no registered set has those ranks."""
    state.require_init()
    world = _mpi_world[0]
    if world is None:
        raise ValueError('hvd: process sets can be looked up by MPI communicator only when the world came from MPI '
                         '(hvd.init under mpirun, or hvd.init(comm=<mpi4py communicator>))')
    ranks = mpi.translate(comm, world)
    for pid, rs in registered().items():
        if rs == ranks:
            return pid
    raise ValueError('hvd: no registered process set has the ranks %s of communicator %r' % (ranks, comm))


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a timeline to file_path (needs HOROVOD_TIMELINE=DYNAMIC)."""
    state.lib().start_timeline(file_path, mark_cycles)


def stop_timeline():
    """Stops the timeline started with start_timeline."""
    state.lib().stop_timeline()


# Capabilities, answered truthfully: hvd's data plane is its own (shared
# memory and TCP, in Go), or MPI in the MPI build of libhvd.so (make
# python-mpi; docs/mpi.md), or NCCL in builds with -tags hvd_nccl (the
# library's backend registry answers, hvd_backend_built); it is not Gloo,
# DDL or oneCCL. mpi_built reads the library file instead of loading it
# (loading the MPI build loads libmpi).
def mpi_built():
    """Whether libhvd.so is the MPI build (linked against libmpi)."""
    return mpi.lib_built_with_mpi(loader.loaded() or loader.default_path())


def mpi_enabled():
    """Whether the MPI data plane serves this job: the MPI build, under an
    MPI launch, with HVD_BACKEND=mpi (every set) or auto across hosts (the
    sets that span hosts: backends/mpi's registry rule)."""
    if not mpi_built() or not is_initialized():
        return False
    under_mpi = _mpi_world[0] is not None or mpi.mpi_launch() > 0
    choice = os.environ.get('HVD_BACKEND', 'auto').strip().lower() or 'auto'
    return under_mpi and (choice == 'mpi' or (choice == 'auto' and cross_size() > 1))


def mpi_threads_supported():
    """Whether MPI runs with MPI_THREAD_MULTIPLE (which the MPI data plane
    requires); ValueError when MPI is not enabled, as Horovod."""
    if not mpi_enabled():
        raise ValueError('Horovod MPI is not enabled: hvd uses its own data plane here (mpi_enabled() is False; '
                         'the MPI build with HVD_BACKEND=mpi under mpirun enables it, docs/mpi.md).')
    MPI = mpi.import_mpi('mpi_threads_supported()')
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    """1 when this library has the NCCL data plane (its backend registry:
    builds with -tags hvd_nccl), else 0. Horovod returns NCCL's version;
    hvd does not load NCCL to ask."""
    return 1 if state.lib().backend_built('nccl') else 0


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
    'comm_process_set_id',
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
        return comm_process_set_id(comm)

