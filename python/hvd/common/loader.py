"""Finds and loads libhvd.so, checks it, and binds the generated ctypes
layer (_abi.py) to it.

The library is looked for in $HVD_LIBRARY, then next to the hvd package
(hvd/libhvd.so, where `make python` puts it). It is refused when it was
built from another version of the ABI spec, and when another Go runtime is
already loaded in this process: libhvd.so contains the Go runtime, and a
process can hold only one (two Go runtimes fight over signals and threads).

Fork safety: after os.fork() (for example a torch DataLoader with worker
processes) the child has no Go runtime threads. Nothing in the child may
call into the library, so the binding is replaced there by one that raises a
clear error; topology queries answer from values cached at init.
"""
import ctypes
import os
import re
import struct

from hvd.common import _abi
from hvd.common.exceptions import HorovodInternalError

_loaded = None  # (path, (st_dev, st_ino)) of the library in use
_forked = False

_EXC = {
    'ValueError': ValueError,
    'NotImplementedError': NotImplementedError,
    'HorovodInternalError': HorovodInternalError,
    'RuntimeError': RuntimeError,
}


# Go SDK words -> Python words, for text a caller got from the Go SDK some
# other way. Not on the error path: the library writes its messages in the
# caller's words itself (cmd/libhvd/errors.go) and raise_error only maps
# the code to an exception class.
_WORDS = [
    (re.compile(r'(?:hvd: )?not initialized: call Init first \(or the SDK was shut down\)'),
     'Horovod has not been initialized: call hvd.init() first (or hvd.shutdown() was called)'),
    (re.compile(r'\bthe SDK\b'), 'hvd'),
    (re.compile(r'\b(?:sdk\.)?Init(?:\(\))?(?=[\s:;,.)]|$)'), 'hvd.init()'),
    (re.compile(r'\b(?:sdk\.)?Start(?:\(\))?(?=[\s:;,.)]|$)'), 'hvd.init()'),
    (re.compile(r'\b(?:sdk\.)?Shutdown(?:\(\))?(?=[\s:;,.)]|$)'), 'hvd.shutdown()'),
    (re.compile(r'\b(?:World\.)?AddProcessSet\b(?:\(\))?'), 'hvd.add_process_set()'),
    (re.compile(r'\b(?:World\.)?RemoveProcessSet\b(?:\(\))?'), 'hvd.remove_process_set()'),
    (re.compile(r'\b(?:Handle\.)?Wait\(\)'), 'hvd.synchronize()'),
    (re.compile(r"the process set's engine has been shut down"),
     'Horovod has been shut down (hvd.shutdown(), or a failure on some rank) before the op completed'),
    (re.compile(r'\binvalid argument: '), ''),
]


def python_words(message):
    """message with the Go SDK's words (API names, sentinel texts) replaced
    by Python's. The library's own errors need none of it (see _WORDS)."""
    for pattern, repl in _WORDS:
        message = pattern.sub(repl, message)
    return message


# The first peer failure this process saw (a dead, stopped or unreachable
# peer): under mpirun, hvd aborts the MPI job at exit after one
# (mpi.abort_at_exit) instead of letting MPI_Finalize wait for that peer.
peer_failures = []


def raise_error(code, message, phase):
    """The error hook the generated functions call: the exception class is
    the code's (the spec's table, _abi.ERRORS) at call time, and
    HorovodInternalError for anything that fails while the op runs (as
    Horovod maps them). message is the library's, already in the caller's
    words; it is not rewritten here."""
    _, name = _abi.ERRORS.get(code, ('INTERNAL', 'HorovodInternalError'))
    if code == _abi.E_PEER_FAILURE and not peer_failures:
        peer_failures.append(message)
    exc = HorovodInternalError(message) if phase == 'sync' else _EXC[name](message)
    exc.hvd_code = code
    raise exc


def elastic_worker():
    """Whether this process is an elastic worker: HOROVOD_ELASTIC set to a
    non-zero integer, the library's own rule (sdk.IsElastic), read here so
    that no other module reads the launch environment for it."""
    try:
        return int(os.environ.get('HOROVOD_ELASTIC', '').strip()) != 0
    except ValueError:
        return False


def default_path():
    env = os.environ.get('HVD_LIBRARY')
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'libhvd.so')


def _has_go_runtime(path):
    """Whether the ELF file at path is a Go binary or library (it has a
    .go.buildinfo section)."""
    try:
        with open(path, 'rb') as f:
            ident = f.read(64)
            if len(ident) < 64 or ident[:4] != b'\x7fELF' or ident[4] != 2:
                return False
            end = '<' if ident[5] == 1 else '>'
            shoff, = struct.unpack(end + 'Q', ident[0x28:0x30])
            shentsize, shnum, shstrndx = struct.unpack(end + 'HHH', ident[0x3A:0x40])
            if shoff == 0 or shstrndx >= shnum or shentsize < 64:
                return False
            f.seek(shoff + shstrndx * shentsize)
            sh = f.read(64)
            off, size = struct.unpack(end + 'QQ', sh[0x18:0x28])
            if size > (16 << 20):
                return False
            f.seek(off)
            return b'.go.buildinfo\x00' in f.read(size)
    except (OSError, struct.error):
        return False


def go_runtimes_loaded(exclude=None):
    """Paths of mapped files of this process that carry a Go runtime, other
    than the file identified by exclude ((st_dev, st_ino))."""
    seen, found = set(), []
    try:
        with open('/proc/self/maps') as maps:
            lines = maps.readlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith('/'):
            continue
        path = parts[5].strip()
        if path in seen:
            continue
        seen.add(path)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if exclude is not None and (st.st_dev, st.st_ino) == exclude:
            continue
        if _has_go_runtime(path):
            found.append(path)
    return found


class _ForkedFunction:
    """Stands in for one library function in a forked child: calling it
    raises."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args):
        raise RuntimeError(
            'hvd: %s called in a process forked from one that loaded libhvd.so; the Go runtime does not '
            'survive fork(), so a forked child (e.g. a DataLoader worker) must not run hvd collectives. '
            'Run them in the parent process.' % self.name)


class _ForkedLib:
    """Stands in for the library in a forked child (bound in its place, so
    every generated function raises when called)."""

    def __getattr__(self, name):
        return _ForkedFunction(name)


def _after_fork_in_child():
    global _forked
    if _loaded is not None:
        _forked = True
        _abi.bind(_ForkedLib(), raise_error)


def forked():
    """Whether this process was forked from one that had loaded libhvd.so."""
    return _forked


def loaded():
    """The path of the loaded libhvd.so, or None before load()."""
    return None if _loaded is None else _loaded[0]


def load(path=None):
    """Loads and binds libhvd.so (once per process); returns its path."""
    global _loaded
    path = os.path.abspath(path or default_path())
    if not os.path.exists(path):
        raise ImportError(
            'hvd: libhvd.so not found at %s. Build it with `make python` (the package is then under '
            'build/python) or point HVD_LIBRARY at it.' % path)
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino)
    if _loaded is not None:
        if _loaded[1] == ident:
            return _loaded[0]
        raise ImportError(
            'hvd: refusing to load %s: libhvd.so is already loaded from %s, and a process can hold only one '
            'Go runtime' % (path, _loaded[0]))
    others = go_runtimes_loaded(exclude=ident)
    if others:
        raise ImportError(
            'hvd: refusing to load %s: another Go runtime is already loaded in this process (%s). '
            'libhvd.so contains the Go runtime and a process can hold only one; load hvd in a process '
            'without other Go shared libraries.' % (path, ', '.join(others)))
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError('hvd: cannot load %s: %s' % (path, e))
    try:
        version = lib.hvd_abi_version
    except AttributeError:
        raise ImportError('hvd: %s is not libhvd.so (no hvd_abi_version)' % path)
    version.restype = ctypes.c_int64
    v = version()
    if v != _abi.ABI_VERSION:
        raise ImportError(
            'hvd: %s implements ABI version %d but this hvd package expects version %d; rebuild it with '
            '`make python` from the same checkout as the package' % (path, v, _abi.ABI_VERSION))
    _abi.bind(lib, raise_error)
    _loaded = (path, ident)
    return path


os.register_at_fork(after_in_child=_after_fork_in_child)
