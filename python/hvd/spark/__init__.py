"""hvd.spark: Horovod's ``horovod.spark.run`` on hvd.

``hvd.spark.run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None,
env=None, stdout=None, stderr=None, verbose=1, nics=None,
prefix_output_with_timestamp=False)`` runs ``fn(*args, **kwargs)`` as
``num_proc`` ranks of one hvd job inside the active SparkContext and returns
the list of the return values, ordered by rank.

How: one Spark job of ``num_proc`` partitions in barrier execution mode, so
that Spark schedules all its tasks at once or none (one task per rank,
rank = partition id). The driver serves the job's rendezvous store
(hvd._driver.store, authenticated with a fresh secret key) and tells every
task its rank, the store's address and the local/cross hints computed from
the executors' hosts; each task runs ``fn`` in its Python worker under those
variables (``fn`` calls ``hvd.init()`` itself, as with Horovod), and the
records come back through the job's collect. What ``fn`` prints through
Python's sys.stdout/sys.stderr is forwarded line by line to ``stdout`` /
``stderr`` (default: the driver's sys.stdout/sys.stderr) with hvdrun's
``[rank]<stdout>:`` prefixes, also kept in the executors' logs.

Failures: ``fn`` raising on any rank fails the run with
:class:`hvd.runner.RunError` naming the first rank that raised (by time),
its exception's type and message and the remote traceback; hvd is shut down
on that rank at once, so ranks blocked on it fail instead of hanging.
Tasks that do not all start within ``start_timeout`` seconds (default
``HOROVOD_SPARK_START_TIMEOUT``, else 600; e.g. fewer free task slots than
``num_proc``) cancel the Spark job and raise a TimeoutError. A Spark
failure (executor lost, ...) raises RunError with Spark's message. A stage
retried by Spark rendezvouses in a new store scope (the world's epoch is
the smallest task attempt id of the stage attempt), never with the keys of the failed attempt.

Not supported: ``use_mpi``/``use_gloo`` and the other horovodrun arguments
(hvd has one controller); ``nics`` takes one interface (its IPv4 address is
where the tasks reach the driver, and HOROVOD_GLOO_IFACE in the tasks);
``verbose`` >= 2 prints the driver's steps on stderr.

Pickling: ``fn``, ``args`` and ``kwargs`` travel with Spark's cloudpickle
(lambdas and closures work); the return values come back pickled.

What Spark shares with hvd.ray — the driver's store, the per-rank worker,
the elastic agents, their ssh stand-in and the elastic driver — is in
hvd._driver; this package is Spark's part only (its old module names
hvd.spark.store, hvd.spark.agent and ``python -m hvd.spark.agent_ssh`` still
work).
"""
import os
import socket
import sys
import threading
import time
import uuid

from hvd._driver import agent, store  # noqa: F401  (their old names: hvd.spark.agent, hvd.spark.store)
from hvd._driver import store as _store
from hvd._driver import worker

__all__ = ['run', 'run_elastic']


def _active_context():
    try:
        import pyspark
    except ImportError as e:
        raise ImportError('hvd.spark needs pyspark (pip install pyspark): %s' % e) from None
    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        raise Exception('Could not find an active SparkContext, are you running in a PySpark session?')
    return sc


class _Output:
    """Writes forwarded chunks to the driver's streams with hvdrun's
    prefixes."""

    def __init__(self, stdout, stderr, timestamps):
        self.streams = {'stdout': stdout, 'stderr': stderr}
        self.timestamps = timestamps
        self.lock = threading.Lock()

    def __call__(self, rank, stream, data):
        out = self.streams.get(stream)
        if out is None:
            return
        text = data.decode('utf-8', 'replace')
        prefix = '[%d]<%s>:' % (rank, stream)
        if self.timestamps:
            prefix = time.strftime('%a %b %d %H:%M:%S %Y') + ' ' + prefix
        lines = text.splitlines(True)
        with self.lock:
            for line in lines:
                out.write(prefix + line if line.endswith('\n') else prefix + line + '\n')
            out.flush()


def driver_address(nics, fallback):
    """(address tasks dial, nic or None)."""
    if nics:
        nics = list(nics)
        if len(nics) != 1:
            raise ValueError('nics=%r: hvd uses one interface for the job; give one' % (nics,))
        return _store.interface_ipv4(nics[0]), nics[0]
    return fallback, None


def _log(verbose, msg):
    if verbose >= 2:
        sys.stderr.write('hvd.spark: %s\n' % msg)
        sys.stderr.flush()


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, env=None, stdout=None, stderr=None,  # noqa: B006
        verbose=1, nics=None, prefix_output_with_timestamp=False):
    """Runs fn as num_proc ranks in Spark tasks; returns the return values
    ordered by rank (see the module doc)."""
    import pickle

    from hvd.runner import RunError
    sc = _active_context()
    if num_proc is None:
        num_proc = sc.defaultParallelism
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError('num_proc=%r: want a positive number of ranks' % (num_proc,))
    start_timeout = _check_start(start_timeout, env)
    addr, nic = driver_address(nics, sc.getConf().get('spark.driver.host') or socket.gethostname())
    server = _store.RendezvousServer(host=addr if nic else '0.0.0.0',
                                     on_output=_Output(stdout or sys.stdout, stderr or sys.stderr,
                                                       prefix_output_with_timestamp))
    group = 'hvd.spark.run-' + uuid.uuid4().hex[:12]
    job = {'addr': addr, 'port': server.port, 'secret': server.secret_hex, 'size': num_proc,
           'start_timeout': start_timeout, 'env': env, 'nic': nic, 'fn': fn, 'args': tuple(args),
           'kwargs': dict(kwargs or {})}
    box = {}

    def partition(_):
        from pyspark import BarrierTaskContext
        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        hosts = [i.address.rsplit(':', 1)[0] for i in ctx.getTaskInfos()]
        lr, ls, cr, cs = worker.local_ranks(hosts)[rank]
        # One number for this attempt of the stage, the same in all its
        # tasks: a retried stage rendezvouses in a scope of its own.
        epoch = min(int(a) for a in ctx.allGather(str(ctx.taskAttemptId())))
        j = dict(job, epoch=epoch)
        rec = worker.run_rank(j, rank, lr, ls, cr, cs, hosts[rank])
        try:
            data = _dumps(rec)
        except Exception as e:  # noqa: B902 - an unpicklable return value
            data = _dumps(worker.error_record(rank, e, 'the return value (%s) cannot be pickled'
                                              % type(rec.get('value')).__name__))
        yield data

    def spark_job():
        try:
            sc.setJobGroup(group, 'hvd.spark.run of %d ranks' % num_proc, interruptOnCancel=True)
            rdd = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(partition)
            box['records'] = rdd.collect()
        except BaseException as e:  # noqa: B902 - re-raised in the caller's thread
            box['error'] = e

    t = threading.Thread(target=spark_job, name='hvd.spark.run', daemon=True)
    t0 = time.monotonic()
    try:
        _log(verbose, 'starting %d tasks (barrier mode), store on %s:%d' % (num_proc, addr, server.port))
        t.start()
        epoch_started = set()
        # Start barrier: release each stage attempt once all its ranks registered.
        while t.is_alive():
            keys = server.keys(_store.TASK_SCOPE)
            by_epoch = {}
            for k in keys:
                e, _, r = k.partition('.')
                by_epoch.setdefault(int(e), set()).add(int(r))
            for e, ranks in by_epoch.items():
                if e not in epoch_started and len(ranks) == num_proc:
                    _log(verbose, 'all %d tasks registered after %.2f s (attempt %d)' % (num_proc, time.monotonic() - t0, e))
                    server.put(worker.CTL_SCOPE, '%s.%d' % (worker.START_KEY, e), b'go')
                    epoch_started.add(e)
            if not epoch_started and time.monotonic() - t0 > start_timeout:
                have = sorted(max(by_epoch.values(), key=len)) if by_epoch else []
                # A barrier job waiting for slots is not active yet (Spark
                # resubmits it every 15 s): cancel what can be cancelled and
                # leave the thread; a task started later finds the store
                # closed and fails at once.
                sc.cancelJobGroup(group)
                t.join(5)
                raise TimeoutError('hvd.spark.run: timed out after %.0f s waiting for %d Spark tasks to start '
                                   '(%d registered: ranks %s); the cluster has too few free task slots for '
                                   'num_proc=%d (barrier mode starts all tasks at once), or the executors '
                                   'cannot reach the driver at %s:%d'
                                   % (start_timeout, num_proc, len(have), have, num_proc, addr, server.port))
            t.join(0.05)
        t.join()
    except BaseException:
        if t.is_alive():
            sc.cancelJobGroup(group)
        raise
    finally:
        server.close()
    if 'error' in box:
        e = box['error']
        msg = str(e).strip().splitlines()
        raise RunError('hvd.spark.run: the Spark job failed: %s' % ('\n'.join(msg[:20]) or type(e).__name__)) from e
    results = {}
    for data in box['records']:
        rec = pickle.loads(data)
        results[rec['rank']] = rec
    missing = [r for r in range(num_proc) if r not in results]
    if missing:
        raise RunError('hvd.spark.run: ranks %s returned no result' % missing)
    first = worker.first_failure(results)
    if first:
        rank, rec = first
        exc = None
        if rec.get('exception') is not None:
            try:
                exc = pickle.loads(rec['exception'])
            except Exception:  # noqa: B902
                exc = None
        msg = ('hvd.spark.run: rank %d (%s) raised %s: %s\n\nTraceback on rank %d:\n%s'
               % (rank, rec.get('host', '?'), rec['type'], rec['message'], rank, rec['traceback'].rstrip()))
        raise RunError(msg, rank=rank, exception=exc, remote_traceback=rec['traceback']) from exc
    return [results[r]['value'] for r in range(num_proc)]


def _dumps(obj):
    import pickle
    try:
        import cloudpickle
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except ImportError:
        from pyspark import cloudpickle
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_num_proc=None, max_num_proc=None,  # noqa: B006
                start_timeout=None, elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None,
                verbose=1, nics=None, prefix_output_with_timestamp=False):
    """Horovod's ``horovod.spark.run_elastic``: runs the elastic training
    function ``fn`` (decorated with ``hvd.elastic.run``) on between
    ``min_num_proc`` and ``max_num_proc`` workers hosted by Spark tasks,
    starting with ``num_proc``; returns the return values of the workers of
    the last world, ordered by their final rank.

    One Spark job of ``max_num_proc`` tasks (not barrier mode: tasks may
    come and go), each running an agent of one slot (hvd._driver.agent);
    hvdrun's elastic driver runs the job over the agents (hvd._driver.elastic,
    docs/engines.md). A worker that dies fails its task's slot for the rest
    of the run and the survivors go on from their last commit; a task that
    is lost drops out; tasks that start later (free slots, or a lost task
    that Spark retries, ``spark.task.maxFailures``) are added.
    Defaults: num_proc = the context's defaultParallelism, min_num_proc =
    num_proc, max_num_proc = num_proc, start_timeout =
    HOROVOD_SPARK_START_TIMEOUT or 600 s, elastic_timeout = hvdrun's (600 s,
    HOROVOD_ELASTIC_TIMEOUT). Raises hvd.runner.RunError when the job fails
    (hvdrun's reason: fewer than min_num_proc slots for elastic_timeout,
    reset_limit passed, every worker failed), TimeoutError when fewer than
    num_proc tasks start within start_timeout."""
    from hvd._driver import elastic as _elastic
    sc = _active_context()
    if num_proc is None:
        num_proc = sc.defaultParallelism
    min_num_proc = num_proc if min_num_proc is None else min_num_proc
    max_num_proc = num_proc if max_num_proc is None else max_num_proc
    _elastic.check_args(num_proc, min_num_proc, max_num_proc, 'hvd.spark.run_elastic')
    start_timeout = _check_start(start_timeout, env)
    addr, nic = driver_address(nics, sc.getConf().get('spark.driver.host') or socket.gethostname())
    group = 'hvd.spark.run_elastic-' + uuid.uuid4().hex[:12]
    box = {}
    thread = []

    def start_agents(job):
        from hvd._driver import agent as _agent

        def partition(it):
            from pyspark import TaskContext
            ctx = TaskContext.get()
            i, attempt = ctx.partitionId(), ctx.attemptNumber()
            # a retried task is a new host: hvdrun blacklists a failed one for the run
            _agent.serve(job, 'spark-task-%d' % i if attempt == 0 else 'spark-task-%d-a%d' % (i, attempt))
            yield i

        def spark_job():
            try:
                sc.setJobGroup(group, 'hvd.spark.run_elastic, up to %d workers' % max_num_proc,
                               interruptOnCancel=True)
                sc.parallelize(range(max_num_proc), max_num_proc).mapPartitions(partition).collect()
            except BaseException as e:  # noqa: B902 - reported by engine_error
                box['error'] = e

        t = threading.Thread(target=spark_job, name='hvd.spark.run_elastic', daemon=True)
        t.start()
        thread.append(t)

    try:
        return _elastic.drive('hvd.spark.run_elastic', start_agents, lambda: box.get('error'), fn, args, kwargs,
                              num_proc, min_num_proc, max_num_proc, addr, nic, start_timeout, elastic_timeout,
                              reset_limit, env, stdout, stderr, verbose, prefix_output_with_timestamp)
    finally:
        # the store is closed: the agents return within a few seconds
        for t in thread:
            t.join(30)
            if t.is_alive():
                sc.cancelJobGroup(group)
                t.join(10)


def _check_start(start_timeout, env):
    """run's and run_elastic's start_timeout (default
    HOROVOD_SPARK_START_TIMEOUT, else 600 s) and env, checked."""
    if start_timeout is None:
        start_timeout = float(os.environ.get('HOROVOD_SPARK_START_TIMEOUT', '') or 600)
    if start_timeout <= 0:
        raise ValueError('start_timeout=%r: want a positive number of seconds' % (start_timeout,))
    if env is not None and not isinstance(env, dict):
        raise ValueError('env must be a dict of variables for the tasks, not %s' % type(env).__name__)
    return start_timeout
