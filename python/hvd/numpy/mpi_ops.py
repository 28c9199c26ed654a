"""hvd.numpy's collectives (the module hvd.numpy re-exports), under the
module name Horovod's framework packages use (horovod.<framework>.mpi_ops),
with the private names tests written for Horovod reach into: ``_basics`` (a
HorovodBasics: ``_get_process_set_ids_and_ranks()`` and friends),
``handle_average_backwards_compatibility`` and ``_handle_map``.

The work is hvd.common.collectives', bound to numpy arrays in arrays.py;
this module gives it Horovod's signatures (see hvd.numpy for the rules).
"""
from hvd.common.basics import HorovodBasics as _HorovodBasics
from hvd.common.basics import (init, shutdown, is_initialized, start_timeline, stop_timeline, size,  # noqa: F401
                               local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
                               mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
                               nccl_built, ddl_built, ccl_built, cuda_built, rocm_built)
from hvd.common.collectives import barrier, join  # noqa: F401
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from hvd.common.handles import handle_map as _handle_map  # noqa: F401  (Horovod's mpi_ops._handle_map)
from hvd.common.handles import poll, synchronize  # noqa: F401
from hvd.common.ops import (Average, Sum, Adasum, Min, Max, Product,  # noqa: F401
                            handle_average_backwards_compatibility)
from hvd.common.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: F401
                                     remove_process_set)
from hvd.numpy.arrays import collectives as _c
from hvd.numpy.compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401

_basics = _HorovodBasics()


# ---------------------------------------------------------------- allreduce

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Asynchronously averages (or reduces with op) the array over the
    process set; synchronize(handle) returns a new array (the input is not
    modified)."""
    return _c.allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Averages (or reduces with op) the array over the process set and
    returns the result as a new array."""
    return _c.allreduce(tensor, average, name, compression, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place allreduce_async: the result is written into the array."""
    return _c.allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns the array."""
    return _c.allreduce_(tensor, average, name, op, prescale_factor, postscale_factor, process_set)


# -------------------------------------------------------- grouped allreduce

def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Asynchronously allreduces a list of arrays as one group; synchronize
    returns a list of new arrays."""
    return _c.grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of arrays as one group; returns a list of new arrays."""
    return _c.grouped_allreduce(tensors, average, name, compression, op, prescale_factor, postscale_factor,
                                process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place grouped_allreduce_async of a list of arrays."""
    return _c.grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the arrays."""
    return _c.grouped_allreduce_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)


# ---------------------------------------------------------------- allgather

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronously concatenates the array of every member of the set
    along dimension 0 (which may differ per rank); synchronize returns a new
    array."""
    return _c.allgather_async(tensor, name, process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates the array of every member along dimension 0; returns a
    new array."""
    return _c.allgather(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronously allgathers a list of arrays as one group."""
    return _c.grouped_allgather_async(tensors, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of arrays as one group; returns a list."""
    return _c.grouped_allgather(tensors, name, process_set)


# ---------------------------------------------------------------- broadcast

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronously broadcasts root_rank's array (root_rank is a global
    rank, a member of the set); synchronize returns a new array."""
    return _c.broadcast_async(tensor, root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's array on every member of the set."""
    return _c.broadcast(tensor, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast_async: root_rank's values are written into the
    array."""
    return _c.broadcast_async_(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns the array."""
    return _c.broadcast_(tensor, root_rank, name, process_set)


# ----------------------------------------------------------------- alltoall

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronously sends splits[i] rows of the array (dimension 0, in
    order) to the i-th member of the set; without splits dimension 0 is
    divided evenly. synchronize returns (output, received_splits), the
    latter an int32 array."""
    return _c.alltoall_async(tensor, splits, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Alltoall; returns the output, or (output, received_splits) when
    splits is given."""
    return _c.alltoall(tensor, splits, name, process_set)


# ------------------------------------------------------------ reducescatter

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronously reduces the array over the set and scatters the rows:
    rank r of n gets d0//n + 1 rows if r < d0 % n, else d0//n."""
    return _c.reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter; returns this rank's rows of the reduction."""
    return _c.reducescatter(tensor, name, compression, op, process_set, prescale_factor, postscale_factor)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronously reducescatters a list of arrays as one group."""
    return _c.grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor, postscale_factor)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters a list of arrays as one group; returns a list."""
    return _c.grouped_reducescatter(tensors, name, compression, op, process_set, prescale_factor,
                                    postscale_factor)


# ----------------------------------------------------------- point-to-point

def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Posts a send of the array to global rank ``dst`` (a member of
    ``process_set``) and returns a handle at once; ``synchronize(handle)``
    waits until it is delivered and returns the array. The array must not
    be modified before then."""
    return _c.isend(tensor, dst, tag, process_set)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Posts a receive into the array (written in place, so a writable
    ndarray) from global rank ``src`` and returns a handle at once;
    ``synchronize(handle)`` waits and returns the array, filled."""
    return _c.irecv(tensor, src, tag, process_set)


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends the array to global rank ``dst`` and blocks until it is
    delivered (or, for small messages, buffered). Returns None. A large send
    may wait for the matching ``recv``: post receives first, or use isend."""
    return _c.send(tensor, dst, tag, process_set)


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into the array (in place) from global rank ``src``, blocking;
    returns the array."""
    return _c.recv(tensor, src, tag, process_set)


# ---------------------------------------------------------- object helpers

def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank and returns it on every member of the set
    (two broadcasts: <name>.sz and <name>.t)."""
    return _c.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickles obj and returns the list of every member's object, in set-rank
    order (two allgathers: <name>.sz and <name>.t)."""
    return _c.allgather_object(obj, name, process_set)
