"""Handles of async ops, shared by every framework module (hvd.torch,
hvd.numpy, and the modules the TensorFlow and MXNet plugins generate).

A handle is an integer issued by libhvd. track() remembers, per handle, the
objects whose memory the engine works on (kept alive until the op completes)
and a function producing synchronize()'s result. Handles are unique across
frameworks, so one table, handle_map, serves all of them (the framework
modules also expose it as Horovod's mpi_ops._handle_map)."""

from hvd.common import _abi

# handle -> (objects kept alive, function producing synchronize's result)
handle_map = {}


def track(handle, keep, result):
    """Registers an issued handle; returns it."""
    handle_map[handle] = (keep, result)
    return handle


def convert_result(handle, keep, convert):
    """Re-registers a tracked handle so that synchronize returns
    convert(result) instead of the result, and keeps keep alive until then
    (the TensorFlow and MXNet modules hand back framework tensors this way).
    Returns handle."""
    kept, result = handle_map[handle]
    return track(handle, (kept, keep), lambda: convert(result()))


def poll(handle):
    """True when the op has completed (never blocks)."""
    return _abi.poll(handle) != 0


def synchronize(handle):
    """Waits for the op (releasing the GIL) and returns its result: a
    tensor or array, a list for grouped ops, (output, received_splits) for
    alltoall. Raises HorovodInternalError when the op failed. An unknown
    handle returns None, as in Horovod."""
    if handle not in handle_map:
        return None
    try:
        _abi.wait(handle)
        _, result = handle_map[handle]
        return result()
    finally:
        handle_map.pop(handle, None)
        try:
            _abi.release(handle)
        except ValueError:
            pass  # hvd was shut down meanwhile: the handle is gone already
