"""The per-process state every hvd.common module reads: the bound library
and the job's topology.

lib() loads libhvd.so on first use and returns the ctypes layer (_abi).
The topology (rank, size, local and cross ranks) is cached by init() and
dropped by shutdown(): it is constant in between, and a forked child, which
must not call into the Go runtime, answers the queries from it.

This is the lowest layer above the loader: process_sets and basics import
it, and it imports neither (see docs/python.md, "Package layout").
"""
import numbers

from hvd.common import _abi, loader

NOT_INITIALIZED = 'Horovod has not been initialized; use hvd.init().'

_topology = None  # {'rank': ..., 'size': ..., ...} while initialized


def lib():
    """The ctypes layer, bound to libhvd.so (loaded on first use)."""
    loader.load()
    return _abi


def set_topology(topology):
    """Caches the topology (a dict with the keys the queries below read),
    or drops it (None)."""
    global _topology
    _topology = topology


def is_initialized():
    """Whether hvd.init() has been called (and not hvd.shutdown())."""
    if loader.forked():
        return _topology is not None
    return loader.loaded() is not None and _abi.is_initialized() == 1


def require_init():
    """ValueError unless initialized."""
    if not is_initialized():
        raise ValueError(NOT_INITIALIZED)


def _query(key):
    if _topology is None or (not loader.forked() and _abi.is_initialized() != 1):
        raise ValueError(NOT_INITIALIZED)
    return _topology[key]


def size():
    """Number of processes in the job."""
    return _query('size')


def rank():
    """This process's global rank."""
    return _query('rank')


def local_size():
    """Number of processes on this host."""
    return _query('local_size')


def local_rank():
    """This process's rank among the processes on its host."""
    return _query('local_rank')


def cross_size():
    """Number of hosts that have a process with this local rank."""
    return _query('cross_size')


def cross_rank():
    """This host's index among the hosts that have this local rank."""
    return _query('cross_rank')


def is_homogeneous():
    """Whether every host runs the same number of processes."""
    return _query('is_homogeneous')


def as_rank_list(ranks):
    """ranks as a sorted list of ints; ValueError for anything else (the
    message is Horovod's ProcessSet's)."""
    out = []
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, numbers.Integral):
            raise ValueError('ProcessSet should be initialized with a list of process ranks or an mpi4py Comm object')
        out.append(int(r))
    return sorted(out)
