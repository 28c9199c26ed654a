"""Process sets (horovod.common.process_sets): the ProcessSet objects, the
registry of the ones this process knows, and dynamic add/remove.

basics.init() and basics.shutdown() call init_process_sets() and
shutdown_process_sets(); every collective turns its process_set argument
into the library's id with set_id(). This module reads the library and the
topology through state and never imports basics.
"""
import collections.abc
import warnings

from hvd.common import _abi, mpi, setspecs, state


class ProcessSet:
    """A group of global ranks that runs collectives of its own.

    ProcessSet(ranks) stores the ranks sorted; it gets a process_set_id when
    registered (hvd.init(process_sets=[...]) or hvd.add_process_set). Like
    Horovod's, it has no __eq__: objects compare by identity.

    ProcessSet(callable) gives the ranks as a function of the world size,
    ``ProcessSet(lambda size: range(0, size, 2))``: ranks is filled in when
    it is registered, and again after every elastic reset (docs/elastic.md,
    "Process sets through resets"). A set that cannot exist in a new world
    is unregistered: process_set_id becomes None, unregistered says why, and
    using it raises ValueError naming it.
    """

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.ranks = None
        self.mpi_comm = None
        self.spec = None
        self.unregistered = None
        if callable(ranks_or_comm) and not isinstance(ranks_or_comm, collections.abc.Iterable):
            self.spec = ranks_or_comm
        elif isinstance(ranks_or_comm, collections.abc.Iterable) and not isinstance(ranks_or_comm, (str, bytes)):
            self.ranks = state.as_rank_list(ranks_or_comm)
        elif mpi.is_comm(ranks_or_comm):
            # Translated to world ranks by hvd.init (hvd.common.mpi).
            self.mpi_comm = ranks_or_comm
        else:
            raise ValueError('ProcessSet should be initialized with a list of process ranks, a callable of the '
                             'world size or an mpi4py Comm object; got %r' % (ranks_or_comm,))

    def _invalidate(self, reason=None):
        self.process_set_id = None
        self.unregistered = reason

    def size(self):
        """Number of ranks in the set; None while it is not registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank inside the set; None while unregistered;
        ValueError when this process is not a member."""
        if self.process_set_id is None:
            return None
        r = state.rank()
        if r not in self.ranks:
            raise ValueError('Process is not part of provided process set')
        return self.ranks.index(r)

    def included(self):
        """Whether this process is a member (None when ranks are unknown)."""
        if self.ranks is None:
            return None
        return state.rank() in self.ranks

    def __str__(self):
        return 'ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)' % (self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# Every ProcessSet object registered in this process, by id (several
# objects may name the same set: init() maps objects passed again).
_id_to_process_sets = {0: [global_process_set]}


def set_id(process_set):
    """The id to pass to the library; ValueError for a set that was never
    registered, or was removed (its id is None)."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError('process_set must be a ProcessSet, not %r' % (process_set,))
    pid = process_set.process_set_id
    if pid is None and process_set.unregistered:
        raise ValueError('%s: %s' % (process_set, process_set.unregistered))
    if pid is None:
        raise ValueError('Process set provided does not exist, or has not been registered: %s. Pass it to '
                         'hvd.init(process_sets=[...]), or to hvd.add_process_set() with dynamic process sets; '
                         'a removed set must be added again.' % (process_set,))
    return pid


def registered():
    """{id: sorted global ranks} of every set the library knows."""
    return {i: list(_abi.process_set_ranks(i)) for i in _abi.process_set_ids()}


def remove_id(pid):
    """Removes the set with id pid from the library (collective); False when
    the library does not know the id."""
    try:
        _abi.remove_process_set(pid)
    except ValueError as e:
        if getattr(e, 'hvd_code', None) == _abi.E_UNKNOWN_SET:
            return False
        raise
    return True


def init_process_sets(process_set_list):
    """Called by init(): maps the ProcessSet objects passed to init to the
    sets the library registered (by their ranks); ValueError for one it does
    not know."""
    global_process_set.ranks = list(range(state.size()))
    known = {tuple(ranks): i for i, ranks in registered().items()}
    for ps in process_set_list:
        key = tuple(ps.ranks) if ps.spec is None else tuple(setspecs.ranks_of(ps.spec, state.size()))
        if key not in known:
            raise ValueError('process set %s is not registered (hvd was initialized with other process sets)' % ps)
        ps.process_set_id, ps.ranks = known[key], list(key)
        _id_to_process_sets.setdefault(ps.process_set_id, []).append(ps)


def register_static(process_set_list):
    """Called by init() when it started the library: maps the index-th
    ProcessSet passed to init to the set the library registered for it
    (a callable's ranks are read back); one the library could not register
    in this (elastic) world is unregistered with a warning."""
    global_process_set.ranks = list(range(state.size()))
    for i, ps in enumerate(process_set_list):
        pid = _abi.static_process_set_id(i)
        if pid < 0:
            _unregister(ps, 'it cannot exist in this world of %d processes' % state.size())
            continue
        ps.process_set_id = pid
        ps.ranks = list(_abi.process_set_ranks(pid))
        ps.unregistered = None
        _id_to_process_sets.setdefault(pid, []).append(ps)


def _unregister(ps, why):
    msg = 'process set %s was unregistered at an elastic reset: %s; add it again if needed' % (ps, why)
    ps._invalidate(msg)
    warnings.warn('hvd: ' + msg, RuntimeWarning)


def held():
    """Every registered ProcessSet object but the global set, with its id:
    what an elastic reset maps onto the next world (remap)."""
    return [(pid, ps) for pid, objs in _id_to_process_sets.items() if pid != 0 for ps in objs]


def remap(held_sets):
    """After an elastic reset (shutdown, then init): every object of
    held_sets gets its set's ranks in the new world, under the same id (the
    library keeps ids); one whose set the library did not register again
    is unregistered with a warning naming it."""
    now = registered()
    for pid, ps in held_sets:
        if pid in now:
            ps.process_set_id, ps.ranks, ps.unregistered = pid, now[pid], None
            if ps not in _id_to_process_sets.setdefault(pid, []):
                _id_to_process_sets[pid].append(ps)
        else:
            _unregister(ps, 'its ranks do not exist in the new world of %d processes' % state.size())


def shutdown_process_sets():
    """Called by shutdown(): every registered set but the global one loses
    its id."""
    for pid, objs in list(_id_to_process_sets.items()):
        if pid != 0:
            for ps in objs:
                ps._invalidate()
    _id_to_process_sets.clear()
    _id_to_process_sets[0] = [global_process_set]
    global_process_set.ranks = []


def add_process_set(process_set):
    """Registers a process set (dynamic mode). Collective: every process,
    member or not, makes the same calls in the same order. Returns the
    registered ProcessSet."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.mpi_comm is not None:
        raise NotImplementedError('Dynamically adding process sets defined by an MPI communicator is not implemented '
                                  '(as in Horovod): give the ranks as a list')
    if process_set.process_set_id is not None:
        raise ValueError('Attempted to add a process set that is already registered: %s' % process_set)
    state.lib()
    if process_set.spec is not None:
        pid = setspecs.call(_abi.add_process_set_spec, setspecs.token(process_set.spec))
        process_set.ranks = list(_abi.process_set_ranks(pid))
    else:
        pid = _abi.add_process_set(process_set.ranks)
    process_set.process_set_id, process_set.unregistered = pid, None
    _id_to_process_sets.setdefault(pid, []).append(process_set)
    return process_set


def remove_process_set(process_set):
    """Removes a process set (dynamic mode; collective). Returns True on
    success, False when the set is not registered or is the global set.
    Pending ops on it fail with HorovodInternalError."""
    pid = process_set.process_set_id
    if pid is None or pid == 0:
        return False
    process_set._invalidate()
    for ps in _id_to_process_sets.pop(pid, []):
        ps._invalidate()
    return remove_id(pid)
