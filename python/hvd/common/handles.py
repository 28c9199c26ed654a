"""Handles of async ops, shared by every framework module (hvd.torch,
hvd.numpy, and the modules the TensorFlow and MXNet plugins generate).

A handle is an integer issued by libhvd. track() remembers, per handle, the
objects whose memory the engine works on (kept alive until the op completes)
and a function producing synchronize()'s result. Handles are unique across
frameworks, so one table serves all of them."""

from hvd.common import _abi
from hvd.common.process_sets import global_process_set, _set_id

# handle -> (objects kept alive, function producing synchronize's result)
_handle_map = {}


def track(handle, keep, result):
    """Registers an issued handle; returns it."""
    _handle_map[handle] = (keep, result)
    return handle


def poll(handle):
    """True when the op has completed (never blocks)."""
    return _abi.poll(handle) != 0


def synchronize(handle):
    """Waits for the op (releasing the GIL) and returns its result: a
    tensor or array, a list for grouped ops, (output, received_splits) for
    alltoall. Raises HorovodInternalError when the op failed. An unknown
    handle returns None, as in Horovod."""
    if handle not in _handle_map:
        return None
    try:
        _abi.wait(handle)
        _, result = _handle_map[handle]
        return result()
    finally:
        _handle_map.pop(handle, None)
        try:
            _abi.release(handle)
        except ValueError:
            pass  # hvd was shut down meanwhile: the handle is gone already


def join(device=-1):
    """Declares that this rank has no more data: until every rank has
    joined, other ranks' allreduces see zeros from it. Blocks until all have
    joined and returns the global rank that joined last."""
    return _abi.join()


def barrier(process_set=global_process_set):
    """Blocks until every member of the process set has called it."""
    _abi.barrier(_set_id(process_set))
