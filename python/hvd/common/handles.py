"""Handles of async ops, shared by every framework module (hvd.torch,
hvd.numpy, and the modules the TensorFlow and MXNet plugins generate).

A handle is an integer issued by libhvd. track() remembers, per handle, the
objects whose memory the engine works on (kept alive until the op completes)
and a function producing synchronize()'s result. Handles are unique across
frameworks, so one table, handle_map, serves all of them (the framework
modules also expose it as Horovod's mpi_ops._handle_map).

The per-op calls (wait and release here, the allreduce calls in
collectives.py) call the library directly with this thread's error buffer
(errbuf) instead of through _abi's generated wrappers, which allocate and
zero a 4 KiB buffer per call: a small op's binding costs a few µs, and a
batch of async ops pays it several times per tensor (issue 18). Errors are
raised exactly as the wrappers raise them (check)."""

import ctypes
import threading

from hvd.common import _abi

_local = threading.local()


def errbuf():
    """This thread's buffer for the library's error messages (the library
    writes a NUL-terminated message only when a call fails)."""
    buf = getattr(_local, 'err', None)
    if buf is None:
        buf = _local.err = ctypes.create_string_buffer(_abi.ERR_LEN)
    return buf


def check(r, buf, phase='call'):
    """Raises the library's error for a negative return r, as the generated
    wrappers do (phase 'sync': the op's own failure); returns r."""
    if r < 0:
        _abi.raise_error(-r, buf.value.decode('utf-8', 'replace'), phase)
    return r

# handle -> (objects kept alive, function producing synchronize's result)
handle_map = {}

# Handles of handle_map whose op the library has already completed and
# released (the C path's synchronize reaps the finished in-place ops of a
# batch with one hvd_wait_reap call): their poll is True and their
# synchronize returns the result without calling the library.
reaped = set()


def track(handle, keep, result):
    """Registers an issued handle; returns it. result None: synchronize
    returns keep itself (an in-place op on a tensor the engine writes
    directly, without a function per op)."""
    handle_map[handle] = (keep, result)
    return handle


def _result(entry):
    keep, result = entry
    return keep if result is None else result()


def convert_result(handle, keep, convert):
    """Re-registers a tracked handle so that synchronize returns
    convert(result) instead of the result, and keeps keep alive until then
    (the TensorFlow and MXNet modules hand back framework tensors this way).
    Returns handle."""
    entry = handle_map[handle]
    return track(handle, (entry[0], keep), lambda: convert(_result(entry)))


# The C fast path's synchronize (hvd.common.fastpath), once a framework
# module set it up; None: this module's Python path.
_fast = None


def set_fast(module):
    """Makes synchronize use module.synchronize first (None: Python only)."""
    global _fast
    _fast = module


def poll(handle):
    """True when the op has completed (never blocks)."""
    if handle in reaped:
        return True
    return _abi.poll(handle) != 0


def synchronize(handle):
    """Waits for the op (releasing the GIL) and returns its result: a
    tensor or array, a list for grouped ops, (output, received_splits) for
    alltoall. Raises HorovodInternalError when the op failed. An unknown
    handle returns None, as in Horovod."""
    if _fast is not None:
        value = _fast.synchronize(handle)
        if value is not NotImplemented:
            return value
    if handle not in handle_map:
        return None
    if handle in reaped:
        reaped.discard(handle)
        return _result(handle_map.pop(handle))
    lib, err = _abi.library(), errbuf()
    try:
        check(lib.hvd_wait(handle, err, _abi.ERR_LEN), err, 'sync')
        return _result(handle_map[handle])
    finally:
        handle_map.pop(handle, None)
        _released(lib.hvd_release(handle, err, _abi.ERR_LEN), err)


def _released(r, err):
    """Checks a release call's result r: an unknown handle is no error (hvd
    was shut down meanwhile: the handles are gone already)."""
    if r < 0:
        try:
            check(r, err)
        except ValueError:
            pass


def synchronize_many(handles, drive=False):
    """synchronize() of every handle, in order, with one wait and one
    release call into the library (instead of two per handle); returns the
    results in order. When an op failed, the handles are synchronized one by
    one instead, so that the first failed one raises as synchronize does.
    drive: with HVD_CALLER_ROUNDS=1 (experimental), the calling thread runs
    the engine's rounds when it is only polling or asleep (shm)."""
    known = [h for h in handles if h in handle_map and h not in reaped]
    lib, err = _abi.library(), errbuf()
    arr = (ctypes.c_int64 * len(known))(*known)
    if known and lib.hvd_wait_many(arr, len(known), 1 if drive else 0, err, _abi.ERR_LEN) < 0:
        return [synchronize(h) for h in handles]
    results = []
    try:
        for h in handles:
            entry = handle_map.pop(h, None)
            reaped.discard(h)
            results.append(_result(entry) if entry is not None else None)
    finally:
        for h in known:
            handle_map.pop(h, None)
        if known:
            _released(lib.hvd_release_many(arr, len(known), err, _abi.ERR_LEN), err)
    return results
