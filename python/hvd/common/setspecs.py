"""Process sets given by a callable of the world size:
``hvd.ProcessSet(lambda size: range(0, size, 2))``.

The library keeps every process set as a spec and registers it again after
each elastic reset (docs/elastic.md, "Process sets through resets"). A
callable is handed to it as a token; the library asks for its ranks in each
new world through the evaluator installed here, a ctypes callback that calls
the callable with the world size. The callable runs on every rank and must
answer the same on every rank; an empty answer means the set does not exist
in that world. An exception inside it is kept and re-raised by call() (hvd.init
or add_process_set), chained to the library's error.
"""
import ctypes
import numbers

from hvd.common import state

EVALUATOR = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                             ctypes.c_int32)

_tokens = {}     # id(callable) -> token
_callables = {}  # token -> callable (kept alive: the library may call it at any reset)
_errors = []     # exceptions the callables raised, not yet re-raised
_installed = [False]


def ranks_of(fn, size):
    """fn(size) as a sorted list of ints; ValueError for anything else."""
    out = []
    for r in fn(size):
        if isinstance(r, bool) or not isinstance(r, numbers.Integral):
            raise ValueError('process set callable %r returned %r for a world of %d ranks: it must return global '
                             'ranks (ints)' % (fn, r, size))
        out.append(int(r))
    return sorted(out)


def evaluate(token, size, out, cap):
    """The evaluator's body (called by the library, on any thread): writes
    the callable's ranks into out when they fit and returns their count, or
    -1 after keeping the exception."""
    try:
        ranks = ranks_of(_callables[token], size)
    except BaseException as e:  # noqa: B902 (kept and re-raised by call())
        _errors.append(e)
        return -1
    for i, r in enumerate(ranks[:cap]):
        out[i] = r
    return len(ranks)


_c_evaluator = EVALUATOR(evaluate)


def token(fn):
    """The token that stands for callable fn in the library (the same for
    the same object); installs the evaluator on first use."""
    if not _installed[0]:
        state.lib().set_spec_evaluator(ctypes.cast(_c_evaluator, ctypes.c_void_p))
        _installed[0] = True
    key = id(fn)
    if key not in _tokens:
        _tokens[key] = len(_callables) + 1
        _callables[_tokens[key]] = fn
    return _tokens[key]


def call(f, *args):
    """f(*args) (a library call that may evaluate callables); an exception
    a callable raised meanwhile is raised instead, from the library's error."""
    del _errors[:]
    try:
        return f(*args)
    except Exception as e:
        if _errors:
            err = _errors[-1]
            del _errors[:]
            raise err from e
        raise
