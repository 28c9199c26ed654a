"""The C fast path of the per-op calls (_fastpath.c, built by `make python`
when Python's headers are there): hvd.torch's in-place allreduces of plain
tensors and synchronize (which reaps a batch's finished ops in one call). Without it, or with HVD_PY_FASTPATH=0, the same
calls run in Python through ctypes (same results and errors; about 2-3 µs
more per op)."""
import ctypes
import functools
import os

from hvd.common import _abi, handles


def load(handle_map, tensor_type, param_type, pset_type, dtypes, strided, ops, average, tensor_info=None):
    """The set-up _fastpath module, or None (not built, turned off, or the
    library not loaded). ops: the reduce ops it may pass through.
    tensor_info: None, or (capsule, table) of a framework's tensor reader
    (hvd.torch.tensors._tensor_info), used instead of the tensor's
    attributes."""
    if os.environ.get('HVD_PY_FASTPATH', '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return None
    lib = _abi.library()
    if lib is None:
        return None
    try:
        from hvd.common import _fastpath
    except ImportError:
        return None

    def addr(f):
        return ctypes.cast(f, ctypes.c_void_p).value

    args = (addr(lib.hvd_allreduce_async), addr(lib.hvd_allreduce), addr(lib.hvd_wait), addr(lib.hvd_release),
            addr(lib.hvd_wait_reap), handle_map, handles.reaped, tensor_type, param_type, pset_type, dict(dtypes),
            strided, tuple(ops), int(average))
    try:
        _fastpath.setup(*args, *(tensor_info or (None, ())))
    except (TypeError, ValueError):
        if tensor_info is None:
            raise
        _fastpath.setup(*args)  # a reader it cannot take: the tensors' attributes then
    handles.set_fast(_fastpath)
    return _fastpath


def entry(fp, kind, fallback, default_process_set, module):
    """fallback itself when fp (load's module) is None; else the C form of
    it (kind: 'allreduce_async_', 'allreduce_' or 'synchronize'), a
    callable with no Python frame that takes the C path and hands every
    other call to fallback, with fallback's name, documentation and
    signature (inspect follows __wrapped__). module: the module that binds
    it under that name (where pickle finds it)."""
    if fp is None:
        return fallback
    e = functools.update_wrapper(fp.entry(kind, fallback, default_process_set, raise_refused), fallback)
    e.__module__ = module
    return e


def raise_refused(refused):
    """Raises what the library answered an op the C path handed it:
    (code, message), as the ctypes path raises a refused call."""
    _abi.raise_error(refused[0], refused[1], 'call')
