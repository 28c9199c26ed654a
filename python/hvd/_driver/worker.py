"""The worker side shared by hvd.spark and hvd.ray: one call of the user's
function as one rank of a job whose rendezvous store the driver serves
(hvd._driver.store). :func:`run_rank` sets the launch contract's variables
(HOROVOD_RANK, ..., HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, HVD_SECRET_KEY,
HVD_RENDEZVOUS_EPOCH) for the duration of the call, registers with the
driver, waits until every rank has registered (the start barrier, bounded
by the job's start timeout), forwards the function's Python-level
stdout/stderr lines to the driver, calls the function, shuts hvd down if the
function left it initialized (so that peers blocked on this rank fail at
once, and the reused process can join a later job), restores the
environment and returns a result record as hvd.run's workers write it:
``{'ok': True, 'rank', 'value'}`` or ``{'ok': False, 'rank', 'host', 'time',
'type', 'message', 'traceback', 'exception'}``.
"""
import io
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

from hvd.runner.task import error_record, first_failure  # noqa: F401  (hvd.spark.run's failure records are hvd.run's)
from hvd._driver import store as _store

CTL_SCOPE = '_hvd_ctl'
START_KEY = 'start'


class _Forward(io.TextIOBase):
    """A text stream that sends complete lines to the driver (and keeps a
    copy on the original stream, the engine's own log)."""

    def __init__(self, client, rank, name, orig):
        self._client, self._key, self._orig = client, '%d.%s' % (rank, name), orig
        self._buf = ''
        self._lock = threading.Lock()

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError('write() argument must be str, not %s' % type(s).__name__)
        with self._lock:
            self._buf += s
            if '\n' in self._buf:
                head, _, self._buf = self._buf.rpartition('\n')
                self._send(head + '\n')
        try:
            self._orig.write(s)
        except Exception:  # noqa: B902 - the engine's log is best effort
            pass
        return len(s)

    def flush(self):
        with self._lock:
            if self._buf:
                self._send(self._buf)
                self._buf = ''
        try:
            self._orig.flush()
        except Exception:  # noqa: B902
            pass

    def _send(self, text):
        try:
            self._client.put(_store.OUTPUT_SCOPE, self._key, text.encode('utf-8', 'replace'))
        except Exception:  # noqa: B902 - output must never fail the training
            pass


def _wait_start(job, rank):
    """Registers this rank and waits for the driver's start signal."""
    client = _store.StoreClient(job['addr'], job['port'], job['secret'], timeout=10)
    try:
        info = {'rank': rank, 'host': socket.gethostname(), 'pid': os.getpid(), 'epoch': job.get('epoch', 0)}
        client.put(_store.TASK_SCOPE, '%d.%d' % (job.get('epoch', 0), rank), json.dumps(info).encode())
    finally:
        client.close()
    deadline = time.monotonic() + job['start_timeout']
    import http.client
    uri = '/%s/%s' % (CTL_SCOPE, urllib.parse.quote('%s.%d' % (START_KEY, job.get('epoch', 0)), safe=''))
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError('hvd: rank %d waited %.0f s (start_timeout) for the other ranks to start; '
                               'not every task was scheduled: check that the cluster has %d free slots'
                               % (rank, job['start_timeout'], job['size']))
        wait_ms = int(min(left, 10.0) * 1000)
        q = uri + '?wait_ms=%d' % wait_ms
        headers = {}
        secret = bytes.fromhex(job['secret']) if job['secret'] else None
        if secret:
            ts = str(time.time_ns())
            headers = {_store.HEADER_TIMESTAMP: ts, _store.HEADER_AUTH: _store.sign(secret, 'GET', q, ts, b'')}
        conn = http.client.HTTPConnection(job['addr'], job['port'], timeout=wait_ms / 1000.0 + 10)
        try:
            conn.request('GET', q, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        except OSError as e:
            raise RuntimeError('hvd: rank %d cannot reach the driver\'s store at %s:%d: %s'
                               % (rank, job['addr'], job['port'], e)) from None
        finally:
            conn.close()
        if resp.status == 200:
            if body == b'abort':
                raise RuntimeError('hvd: the driver aborted the job before rank %d started' % rank)
            return
        if resp.status != 404:
            raise RuntimeError('hvd: the driver\'s store answered %d: %s' % (resp.status, body.decode(errors='replace')))


def _shutdown_hvd():
    try:
        from hvd.common import basics, loader
        if loader.loaded() is not None:
            basics.shutdown()
    except Exception:  # noqa: B902 - the record already says what failed
        pass


def run_rank(job, rank, local_rank, local_size, cross_rank, cross_size, hostname):
    """Runs job['fn'](*job['args'], **job['kwargs']) as ``rank``; see the
    module doc. ``job``: addr, port, secret (hex), size, epoch,
    start_timeout, env (dict), nic (or None), fn, args, kwargs."""
    from hvd.common import mpi
    env = {
        'HOROVOD_RANK': str(rank), 'HOROVOD_SIZE': str(job['size']),
        'HOROVOD_LOCAL_RANK': str(local_rank), 'HOROVOD_LOCAL_SIZE': str(local_size),
        'HOROVOD_CROSS_RANK': str(cross_rank), 'HOROVOD_CROSS_SIZE': str(cross_size),
        'HOROVOD_HOSTNAME': hostname,
        'HOROVOD_GLOO_RENDEZVOUS_ADDR': job['addr'], 'HOROVOD_GLOO_RENDEZVOUS_PORT': str(job['port']),
        'HVD_SECRET_KEY': job['secret'] or None,
        'HVD_RENDEZVOUS_EPOCH': str(job.get('epoch', 0)),
        # a launcher's variables from the engine's own environment must not win
        'RANK': None, 'WORLD_SIZE': None, 'MASTER_ADDR': None, 'MASTER_PORT': None,
        'OMPI_COMM_WORLD_RANK': None, 'OMPI_COMM_WORLD_SIZE': None, 'PMI_RANK': None, 'PMI_SIZE': None,
        'SLURM_PROCID': None,
    }
    if job.get('nic'):
        env['HOROVOD_GLOO_IFACE'] = job['nic']
    for k, v in (job.get('env') or {}).items():
        env[k] = None if v is None else str(v)
    client = _store.StoreClient(job['addr'], job['port'], job['secret'], timeout=10)
    out = _Forward(client, rank, 'stdout', sys.stdout)
    err = _Forward(client, rank, 'stderr', sys.stderr)
    saved = sys.stdout, sys.stderr
    try:
        with mpi.environment(env):
            try:
                _wait_start(job, rank)
                sys.stdout, sys.stderr = out, err
                value = job['fn'](*job.get('args', ()), **(job.get('kwargs') or {}))
            except BaseException as e:  # noqa: B902 - reported to the driver
                import traceback
                rec = error_record(rank, e, None, when=time.time())  # before the shutdown fails the peers
                traceback.print_exc()
                _shutdown_hvd()
                return rec
            finally:
                sys.stdout, sys.stderr = saved
                out.flush()
                err.flush()
            _shutdown_hvd()
            return {'ok': True, 'rank': rank, 'value': value}
    finally:
        client.close()


def local_ranks(hosts):
    """Per-rank (local_rank, local_size, cross_rank, cross_size) from the
    host of every rank (ranks on a host in rank order; cross over the hosts
    that hold that local rank)."""
    by_host, order = {}, []
    for r, h in enumerate(hosts):
        if h not in by_host:
            by_host[h] = []
            order.append(h)
        by_host[h].append(r)
    out = []
    for r, h in enumerate(hosts):
        lr = by_host[h].index(r)
        holders = [x for x in order if len(by_host[x]) > lr]
        out.append((lr, len(by_host[h]), holders.index(h), len(holders)))
    return out
