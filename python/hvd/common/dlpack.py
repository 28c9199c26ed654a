"""Zero-copy bridges between framework tensors and the numpy arrays that
hvd.numpy hands to the engine (the TensorFlow and MXNet modules run on it).

Into the engine a framework tensor is seen as a numpy array over its own
memory (``view``: no copy); out of it, the numpy array the engine wrote is
given to the framework through DLPack (``capsule``: the framework's
from_dlpack keeps the array alive and uses its memory, no copy). Anything
that cannot go that way (read-only or non-contiguous arrays, dtypes DLPack
does not carry) returns None and the caller copies, as before.
"""
import ctypes

import numpy as np


def capsule(arr):
    """A DLPack capsule over arr's memory (numpy >= 1.22), or None when arr
    cannot be exported without a copy."""
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous or not arr.flags.writeable:
        return None
    export = getattr(arr, '__dlpack__', None)
    if export is None:
        return None
    try:
        return export()
    except (BufferError, TypeError, ValueError):
        return None


def view(address, shape, dtype, owner, writable=False):
    """A numpy array of shape and dtype over the memory at address (C
    order), keeping owner referenced while the array lives. The caller
    guarantees that address holds that many bytes and stays valid while
    owner does."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype=dtype)
    buf = (ctypes.c_char * nbytes).from_address(address)
    buf._hvd_owner = owner  # ctypes objects take attributes: the view's base keeps owner alive
    arr = np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)
    if not writable:
        arr.flags.writeable = False
    return arr


ALIGN = 64  # TensorFlow's EIGEN_MAX_ALIGN_BYTES on AVX-512 builds: it aborts on less


def aligned_empty(shape, dtype, align=ALIGN):
    """A new C-contiguous array whose data starts at a multiple of align
    bytes (numpy's own allocations are only 16-byte aligned), so that a
    framework can take it through DLPack without a copy."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def is_aligned(arr, align=ALIGN):
    """Whether arr's data starts at a multiple of align bytes."""
    return arr.ctypes.data % align == 0
