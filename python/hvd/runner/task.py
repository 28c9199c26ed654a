"""The worker side of hvd.run: ``python -m hvd.runner.task DIR``, started on
every rank by hvdrun. It loads ``(func, args, kwargs)`` from
``DIR/payload.pkl``, calls func and writes ``DIR/result.<rank>`` (atomically:
a temporary file renamed into place): ``{'ok': True, 'value': ...}``, or
``{'ok': False, 'type', 'message', 'traceback', 'exception', 'time', ...}``
when func raised (the exception is also printed on this rank's stderr, and
the process exits non-zero so that hvdrun stops the job)."""
import os
import pickle
import socket
import sys
import time
import traceback

try:
    import cloudpickle as _cloudpickle
except ImportError:
    _cloudpickle = None

_RANK_VARS = ('HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'RANK')


def _rank():
    for var in _RANK_VARS:
        v = os.environ.get(var, '').strip()
        if v:
            return int(v)
    return 0


def _dumps(obj):
    if _cloudpickle is not None:
        return _cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _write(workdir, rank, record):
    path = os.path.join(workdir, 'result.%d' % rank)
    tmp = '%s.tmp.%d' % (path, os.getpid())
    with open(tmp, 'wb') as f:
        f.write(_dumps(record))
    os.replace(tmp, path)


def error_record(rank, exc, what, when=None):
    """The record of a rank whose function raised exc (also hvd.spark's).
    when: the time it was caught (time.time()), taken before the rank shut
    hvd down -- a shutdown fails the peers' collectives, and their records
    must not look earlier than the cause. 'consequence' marks hvd's own
    engine errors (HorovodInternalError: a peer died or closed its
    communicator, a collective failed), which first_failure reports only
    when no rank raised anything else."""
    tb = ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickled = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(pickled)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        pickled = None
    t = type(exc)
    name = t.__qualname__ if t.__module__ in ('builtins', '__main__', '__mp_main__') else '%s.%s' % (t.__module__, t.__qualname__)
    message = str(exc)
    if what:
        message = '%s (%s)' % (message, what) if message else what
    consequence = any(c.__name__ == 'HorovodInternalError' and c.__module__.startswith('hvd.') for c in t.__mro__)
    return {'ok': False, 'rank': rank, 'host': socket.gethostname(), 'time': time.time() if when is None else when,
            'type': name, 'message': message, 'traceback': tb, 'exception': pickled, 'consequence': consequence}


def first_failure(records):
    """(rank, record) of the failure to report among {rank: record}: a
    rank's own exception before hvd's engine errors that follow from it on
    the peers, then the earliest, then the lowest rank; None when every
    record is ok."""
    raised = [(bool(rec.get('consequence')), rec['time'], r, rec) for r, rec in records.items() if not rec['ok']]
    if not raised:
        return None
    _, _, rank, rec = min(raised, key=lambda x: x[:3])
    return rank, rec


def _fixup_main(path):
    """Imports the driver's main script as __mp_main__ and makes it
    __main__, so that functions pickled as __main__.f are found (what
    multiprocessing's spawn mode does)."""
    import runpy
    import types
    mod = types.ModuleType('__mp_main__')
    sys.modules['__mp_main__'] = mod
    mod.__dict__.update(runpy.run_path(path, run_name='__mp_main__'))
    sys.modules['__main__'] = mod


def main(argv):
    if len(argv) != 2:
        sys.stderr.write('usage: python -m hvd.runner.task DIR (started by hvd.run)\n')
        return 2
    workdir = argv[1]
    rank = _rank()
    payload_path = os.path.join(workdir, 'payload.pkl')
    try:
        with open(payload_path, 'rb') as f:
            header = pickle.loads(f.read())
    except OSError as e:
        sys.stderr.write('hvd.run: rank %d on %s cannot read %s: %s; with remote hosts, set HVD_RUN_DIR to a '
                         'directory that every host sees at the same path\n'
                         % (rank, socket.gethostname(), payload_path, e.strerror or e))
        return 1
    try:
        if header.get('main'):
            _fixup_main(header['main'])
        func, args, kwargs = pickle.loads(header['call'])
    except BaseException as e:  # noqa: B902 - reported to the driver
        traceback.print_exc()
        _write(workdir, rank, error_record(rank, e, 'while loading func on rank %d' % rank))
        return 1
    try:
        value = func(*args, **kwargs)
    except SystemExit as e:
        if e.code in (None, 0):
            value = None
        else:
            traceback.print_exc()
            _write(workdir, rank, error_record(rank, e, 'func called sys.exit(%r)' % (e.code,)))
            return e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: B902 - reported to the driver
        traceback.print_exc()
        _write(workdir, rank, error_record(rank, e, None))
        return 1
    try:
        _write(workdir, rank, {'ok': True, 'rank': rank, 'value': value})
    except Exception as e:
        traceback.print_exc()
        _write(workdir, rank, error_record(rank, e, 'the return value (%s) cannot be pickled' % type(value).__name__))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
