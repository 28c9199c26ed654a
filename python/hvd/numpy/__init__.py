"""hvd.numpy: Horovod's collectives on numpy arrays (``import hvd.numpy as hvd``).

The same engine, process sets and error model as hvd.torch, on
``numpy.ndarray``: it is the runtime path of the TensorFlow and MXNet
adapters (which hand their tensors over as numpy arrays) and useful on its
own. Argument names and semantics are Horovod's:

- ``allreduce(tensor, average=None, name=None, compression=Compression.none,
  op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=...)``
  returns a new array; ``allreduce_`` writes the result into ``tensor``;
  ``*_async`` return a handle for ``poll``/``synchronize``; ``grouped_*``
  take a list (negotiated as one group, fused when they fit).
- ``allgather`` concatenates along dimension 0 (which may differ per rank);
  ``broadcast``/``broadcast_`` take a *global* root rank; ``alltoall``
  returns the output, or ``(output, received_splits)`` when ``splits`` is
  given; ``reducescatter`` gives rank r of n ``d0//n + 1`` rows when
  ``r < d0 % n``, else ``d0//n`` (Sum or Average).
- Point-to-point, as hvd.torch's (see its p2p module): ``isend(tensor, dst,
  tag=0, process_set=...)`` and ``irecv(tensor, src, ...)`` return handles
  (irecv fills ``tensor``, a writable ndarray, in place; ``synchronize``
  returns it), ``send`` and ``recv`` block. ``dst``/``src`` are global ranks,
  members of the set, not this rank; tags are 0 .. 2**32-1 and must match
  the sender's (checked, not searched for); messages between two ranks on
  one set arrive in the order sent. A size or tag mismatch raises
  HorovodInternalError and breaks that set's point-to-point connections.
- Bad arguments, a process set this rank is not in, an unknown set: ValueError
  at call time. Ranks that disagree on shape, dtype, op or root, a dead peer,
  shutdown: HorovodInternalError from ``synchronize`` (on every rank).

Memory: an aligned C-contiguous array is handed to the engine by address,
without a copy: the engine reads inputs from it, writes allreduce outputs
into an array allocated here and in-place results (``allreduce_``,
``broadcast_``, ``irecv``/``recv``) into the array itself; sends are read
from the array itself. Other arrays (non-contiguous views,
unaligned buffers) are copied into a contiguous one first and, for in-place
ops, the result is copied back. Allgather, alltoall and reducescatter
outputs, whose shapes only negotiation knows, are copied once out of the
engine. Every array an op uses stays referenced until ``synchronize``
returns; do not modify an input before then. Waiting releases the GIL.

Element types: uint8, int8, uint16, int16, int32, int64, float16, float32,
float64, bool, and bfloat16 when the array's dtype is named ``bfloat16``
(ml_dtypes). Native byte order only.

Layout: the functions are in hvd.numpy.mpi_ops (Horovod's module name, with
its ``_basics``), over hvd.common.collectives bound to numpy arrays in
hvd.numpy.arrays; this module re-exports them.
"""
from hvd.common import loader as _loader

_loader.load()

from hvd.common.handles import handle_map as _handle_map  # noqa: E402,F401  (as mpi_ops._handle_map)
from hvd.numpy.arrays import contiguous as _contig  # noqa: E402,F401  (what the engine is handed)
from hvd.numpy.mpi_ops import (  # noqa: E402,F401
    Adasum, Average, Compression, Compressor, FP16Compressor, HorovodInternalError, HostsUpdatedInterrupt, Max, Min,
    NoneCompressor, Product, ProcessSet, Sum, add_process_set, allgather, allgather_async, allgather_object, allreduce,
    allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
    broadcast_async, broadcast_async_, broadcast_object, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    gloo_built, gloo_enabled, global_process_set, grouped_allgather, grouped_allgather_async, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
    grouped_reducescatter_async, handle_average_backwards_compatibility, init, irecv, is_homogeneous, is_initialized,
    isend, join, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll, rank, recv,
    reducescatter, reducescatter_async, remove_process_set, rocm_built, send, shutdown, size, start_timeline,
    stop_timeline, synchronize)
from hvd.numpy import mpi_ops  # noqa: E402,F401  (hvd.mpi_ops._basics, as in Horovod's modules)
from hvd.numpy import elastic  # noqa: E402,F401  (hvd.elastic.run, ObjectState: docs/elastic.md)
