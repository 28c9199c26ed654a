"""hvd.run: Horovod's programmatic launcher (``horovod.run``) on hvdrun.

``hvd.run(func, args=(), kwargs=None, num_proc=1, hosts=None, ...)`` starts
``num_proc`` worker processes with ``hvdrun`` (the same job ``hvdrun -np N``
starts from a shell), calls ``func(*args, **kwargs)`` in each, and returns the
return values as a list indexed by rank. ``func`` joins the job itself, as
with Horovod: it calls ``hvd.init()`` (through ``hvd.torch``, ``hvd.numpy``,
...) when it needs collectives.

How it works: the driver pickles ``(func, args, kwargs)`` into a private
temporary directory (mode 0700), runs ``hvdrun -np N <python> -m
hvd.runner.task DIR``, and each worker writes its pickled return value, or its
exception and traceback, to ``DIR/result.<rank>``. The directory is removed
when ``run`` returns or raises. Worker output is forwarded to this process's
``sys.stdout``/``sys.stderr`` with hvdrun's ``[rank]<stdout>:`` prefixes.

Pickling: cloudpickle when it is installed (lambdas, closures and functions
defined in ``__main__`` or a notebook travel by value; the workers' Python
needs cloudpickle too); else the standard pickle, which sends functions by
reference: a module-level function of an importable module (the driver's
``sys.path`` is passed on to the workers), or of the main script, which the
workers then import under the name ``__mp_main__`` as ``multiprocessing``'s
spawn mode does (guard the script's entry point with ``if __name__ ==
'__main__':``).

Failures raise :class:`RunError` (a ``RuntimeError``, as Horovod raises):
the first rank whose ``func`` raised, with the exception's type, message
and remote traceback (the exception itself, when it can be unpickled, is
the ``__cause__``); or the first rank that exited without a result (killed,
``os._exit``), with hvdrun's exit status. hvdrun then stops the other ranks,
so a rank waiting in a collective for the failed one does not hang the run.

Where hvdrun is found, first match wins: ``$HVD_HVDRUN``; ``bin/hvdrun``
beside the ``hvd`` package's directory (``hvdgen plugin install --target
DIR`` puts it in ``DIR/bin``); ``hvdrun`` next to the Python interpreter (a
virtual environment's ``bin/``, where ``hvdgen plugin install`` puts it);
``bin/hvdrun`` of the source tree when the package is the tree's
``build/python/hvd``; ``hvdrun`` on ``PATH``.

Remote hosts (``hosts``/``hostfile`` naming other machines) read the
payload and write results through the filesystem: set ``HVD_RUN_DIR`` to a
directory every host sees at the same path (the temporary directory is
created inside it).

Not supported (raise ValueError): the elastic arguments (``min_num_proc``,
``max_num_proc``, ``slots``, ``reset_limit``, ``cooldown_range``) and
``use_mpi=True`` (hvd has no MPI controller). ``mpi_args`` is ignored with a
warning, as Horovod ignores it in Gloo mode; ``disable_cache`` is accepted
(hvdrun caches nothing).
"""
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import deque

try:
    import cloudpickle as _cloudpickle
except ImportError:  # Debian's python3 has no cloudpickle: fall back to pickle
    _cloudpickle = None

__all__ = ['run', 'RunError', 'find_hvdrun']

PAYLOAD = 'payload.pkl'
RESULT_PREFIX = 'result.'


class RunError(RuntimeError):
    """hvd.run failed. ``rank``: the first failing rank (None when the job
    failed before any rank ran); ``exit_code``: hvdrun's exit status;
    ``exception``: the exception func raised on that rank when it could be
    unpickled, else None; ``remote_traceback``: its formatted traceback, or
    None when the rank exited without raising."""

    def __init__(self, message, rank=None, exit_code=None, exception=None, remote_traceback=None):
        super().__init__(message)
        self.rank = rank
        self.exit_code = exit_code
        self.exception = exception
        self.remote_traceback = remote_traceback


def _dumps(obj):
    if _cloudpickle is not None:
        return _cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def find_hvdrun():
    """The hvdrun executable hvd.run uses (see the module doc for the order);
    raises FileNotFoundError naming every place it looked."""
    tried = []
    env = os.environ.get('HVD_HVDRUN')
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise FileNotFoundError('hvd.run: HVD_HVDRUN=%s is not an executable file' % env)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [
        # hvdgen plugin install --target DIR puts hvdrun into DIR/bin, next to DIR/hvd
        os.path.join(pkg_parent, 'bin', 'hvdrun'),
        # a virtual environment's bin/ (hvdgen plugin install without --target)
        os.path.join(os.path.dirname(os.path.abspath(sys.executable)), 'hvdrun'),
        # <tree>/build/python/hvd/runner/__init__.py -> <tree>/bin/hvdrun
        os.path.normpath(os.path.join(pkg_parent, '..', '..', 'bin', 'hvdrun')),
    ]
    for c in candidates:
        tried.append(c)
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    on_path = shutil.which('hvdrun')
    if on_path:
        return on_path
    tried.append('hvdrun on PATH')
    raise FileNotFoundError('hvd.run: hvdrun not found (looked at %s); build it with `make build` '
                            'or set HVD_HVDRUN to its path' % ', '.join(tried))


def _python_path(extra_first):
    """PYTHONPATH for the workers: hvd's own parent directory, then the
    driver's sys.path entries that are not the interpreter's own (stdlib,
    site-packages), then the inherited PYTHONPATH."""
    import site
    import sysconfig
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[k]) for k in ('stdlib', 'platstdlib') if paths.get(k)}
    own = {os.path.realpath(paths[k]) for k in ('purelib', 'platlib') if paths.get(k)}
    try:
        own.update(os.path.realpath(p) for p in site.getsitepackages())
    except AttributeError:  # old virtualenv site module
        pass
    if site.ENABLE_USER_SITE and site.USER_SITE:
        own.add(os.path.realpath(site.USER_SITE))
    out = [extra_first]
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if not os.path.isdir(real) or real in own:
            continue
        if any(real == d or real.startswith(d + os.sep) for d in stdlib):
            continue
        out.append(p)
    inherited = os.environ.get('PYTHONPATH')
    if inherited:
        out.extend(inherited.split(os.pathsep))
    seen, uniq = set(), []
    for p in out:
        if p and p not in seen:
            seen.add(p)
            uniq.append(p)
    return os.pathsep.join(uniq)


def _main_script(func):
    """The main script's path when func lives in __main__ and travels by
    reference (no cloudpickle), else None."""
    if _cloudpickle is not None or getattr(func, '__module__', None) != '__main__':
        return None
    path = getattr(sys.modules.get('__main__'), '__file__', None)
    if not path:
        raise TypeError('hvd.run: %r is defined in an interactive session and cannot be sent to the workers '
                        'without cloudpickle; install cloudpickle or define it in a module' % (func,))
    return os.path.abspath(path)


def _hvdrun_args(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file, disable_cache,
                 output_filename, verbose, network_interface):
    args = ['-np', str(num_proc)]
    if hosts:
        args += ['-H', hosts if isinstance(hosts, str) else ','.join(hosts)]
    if hostfile:
        args += ['--hostfile', str(hostfile)]
    if start_timeout is not None:
        args += ['--start-timeout', str(int(start_timeout))]
    if ssh_port is not None:
        args += ['--ssh-port', str(int(ssh_port))]
    if ssh_identity_file:
        args += ['--ssh-identity-file', str(ssh_identity_file)]
    if disable_cache:
        args.append('--disable-cache')
    if output_filename:
        args += ['--output-filename', str(output_filename)]
    if verbose:
        args.append('--verbose')
    if network_interface:
        nics = network_interface if isinstance(network_interface, str) else ','.join(network_interface)
        args += ['--network-interfaces', nics]
    return args


def _pump(stream, sink_name, keep):
    """Copies stream line by line to sys.<sink_name> (looked up per line, so
    pytest's and notebooks' replacements are honoured); keeps the last lines
    in keep when it is a deque."""
    for raw in iter(stream.readline, b''):
        line = raw.decode('utf-8', 'replace')
        if keep is not None:
            keep.append(line.rstrip('\n'))
        sink = getattr(sys, sink_name)
        try:
            sink.write(line)
            sink.flush()
        except (ValueError, OSError):  # closed sink: keep draining the pipe
            pass
    stream.close()


_FAILED_RANK = re.compile(r'^hvdrun: rank (\d+) \(([^)]*)\) (.*?)(?:; stopping the other .*)?$')


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, start_timeout=None, ssh_port=None,
        ssh_identity_file=None, disable_cache=None, output_filename=None, verbose=None, use_gloo=None,
        use_mpi=None, mpi_args=None, network_interface=None, executable=None, np=None, min_np=None,
        max_np=None):
    """Runs ``func(*args, **kwargs)`` on ``num_proc`` hvd processes and returns
    their return values, a list indexed by rank (Horovod's ``horovod.run``).

    hosts: ``"host1:2,host2:2"`` (or a list of ``"host:slots"``); hostfile: a
    file of ``<host> slots=<n>`` lines (not both). start_timeout, ssh_port,
    ssh_identity_file, output_filename, verbose, network_interface: as
    hvdrun's flags of the same names. executable: the workers' Python
    (default ``sys.executable``). np, min_np, max_np: deprecated spellings.
    Raises RunError when a rank raises or dies, ValueError for arguments hvd
    cannot honour, TypeError when func cannot be pickled, FileNotFoundError
    when hvdrun cannot be found. See the module doc for the details.
    """
    if np is not None:
        if num_proc == 1:
            num_proc = np
        warnings.warn('np is deprecated, use num_proc instead', DeprecationWarning, stacklevel=2)
    if min_np is not None:
        min_num_proc = min_num_proc if min_num_proc is not None else min_np
        warnings.warn('min_np is deprecated, use min_num_proc instead', DeprecationWarning, stacklevel=2)
    if max_np is not None:
        max_num_proc = max_num_proc if max_num_proc is not None else max_np
        warnings.warn('max_np is deprecated, use max_num_proc instead', DeprecationWarning, stacklevel=2)
    if not callable(func):
        raise TypeError('hvd.run: func must be callable, got %r' % (func,))
    if kwargs is None:
        kwargs = {}
    if hosts is not None and hostfile is not None:
        raise ValueError('Argument hosts and hostfile only allow one provided.')
    if use_gloo and use_mpi:
        raise ValueError('Argument use_gloo and use_mpi only allow one set True.')
    if use_mpi:
        raise ValueError('hvd.run(use_mpi=True): hvd has no MPI controller; it always runs in Gloo mode '
                         '(leave use_mpi unset)')
    elastic = {k: v for k, v in (('min_num_proc', min_num_proc), ('max_num_proc', max_num_proc), ('slots', slots),
                                 ('reset_limit', reset_limit), ('cooldown_range', cooldown_range)) if v is not None}
    if elastic:
        raise ValueError('hvd.run(%s): elastic runs are not supported by hvdrun yet; leave them unset'
                         % ', '.join(sorted(elastic)))
    if mpi_args:
        warnings.warn('hvd.run: mpi_args=%r is ignored: hvd runs in Gloo mode' % (mpi_args,), stacklevel=2)
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError('hvd.run: num_proc must be a positive integer, got %r' % (num_proc,))

    hvdrun = find_hvdrun()
    main_script = _main_script(func)
    try:
        # Two layers: the header is plain pickle, so a worker can import the
        # main script before unpickling a function that lives in it.
        payload = pickle.dumps({'main': main_script, 'call': _dumps((func, tuple(args), dict(kwargs)))},
                               protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        hint = ('' if _cloudpickle is not None else
                '; without cloudpickle only module-level functions can be sent (pip install cloudpickle, '
                'or apt-get install python3-cloudpickle)')
        raise TypeError('hvd.run: cannot pickle func %r with its args and kwargs: %s: %s%s'
                        % (func, type(e).__name__, e, hint)) from e

    parent = os.environ.get('HVD_RUN_DIR') or None
    workdir = tempfile.mkdtemp(prefix='hvd-run-', dir=parent)
    try:
        with open(os.path.join(workdir, PAYLOAD), 'wb') as f:
            f.write(payload)
        cmd = [hvdrun] + _hvdrun_args(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                                      disable_cache, output_filename, verbose, network_interface)
        cmd += [executable or sys.executable, '-m', 'hvd.runner.task', workdir]
        env = dict(os.environ)
        hvd_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env['PYTHONPATH'] = _python_path(hvd_parent)
        code, stderr_tail = _launch(cmd, env)
        return _collect(workdir, num_proc, code, stderr_tail)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _launch(cmd, env):
    """Runs hvdrun to the end, forwarding its output; returns its exit code
    and the last lines of its stderr. On KeyboardInterrupt it stops hvdrun
    (which stops the workers) before re-raising."""
    tail = deque(maxlen=40)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, 'stdout', None), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, 'stderr', tail), daemon=True)]
    for t in pumps:
        t.start()
    try:
        code = proc.wait()
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # hvdrun forwards it and reaps every rank
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise
    finally:
        for t in pumps:
            t.join(timeout=10)
    return code, list(tail)


def _read_result(workdir, rank):
    path = os.path.join(workdir, RESULT_PREFIX + str(rank))
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return pickle.loads(data)


def _collect(workdir, num_proc, code, stderr_tail):
    results = [_read_result(workdir, r) for r in range(num_proc)]
    from hvd.runner.task import first_failure
    first = first_failure({r: res for r, res in enumerate(results) if res is not None})
    if first:
        rank, res = first
        exc = None
        if res.get('exception') is not None:
            try:
                exc = pickle.loads(res['exception'])
            except Exception:
                exc = None
        msg = ('hvd.run: rank %d (%s) raised %s: %s\n\nTraceback on rank %d:\n%s'
               % (rank, res.get('host', '?'), res['type'], res['message'], rank, res['traceback'].rstrip()))
        raise RunError(msg, rank=rank, exit_code=code, exception=exc, remote_traceback=res['traceback']) from exc
    missing = [r for r, res in enumerate(results) if res is None]
    if code != 0 or missing:
        rank, reason = None, None
        for line in stderr_tail:
            m = _FAILED_RANK.match(line)
            if m:
                rank, reason = int(m.group(1)), '%s (%s) %s' % (m.group(1), m.group(2), m.group(3))
                break
        if rank is None and code == 0:
            rank = missing[0]  # hvdrun saw every rank exit 0, yet one left no result
        if reason is not None:
            what = 'rank %s before returning a result' % reason
        elif code != 0:
            what = 'hvdrun exited with status %d' % code
        else:
            what = 'rank %d exited with status 0 without returning a result (os._exit?)' % rank
        tail = '\n'.join(stderr_tail[-15:])
        raise RunError('hvd.run: %s; ranks without a result: %s%s'
                       % (what, missing or 'none', ('\nhvdrun stderr (last lines):\n' + tail) if tail else ''),
                       rank=rank, exit_code=code)
    return [res['value'] for res in results]
