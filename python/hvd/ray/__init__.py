"""hvd.ray: Horovod's ``horovod.ray.RayExecutor`` on hvd.

    import ray
    from hvd.ray import RayExecutor

    ray.init(address='auto')
    settings = RayExecutor.create_settings(timeout_s=30)
    executor = RayExecutor(settings, num_workers=4, cpus_per_worker=1, use_gpu=False)
    executor.start()
    results = executor.run(train_fn, args=(...))   # a list, one value per rank, in rank order
    executor.shutdown()

Workers are Ray actors, one per rank, placed through a placement group:
``num_workers`` bundles of ``cpus_per_worker`` CPUs (and ``gpus_per_worker``
GPUs with ``use_gpu``) packed onto as few nodes as fit (PACK), or, with
``num_hosts``, ``num_hosts`` bundles of ``num_workers_per_host`` workers
each on distinct nodes (STRICT_SPREAD). Inside a Ray task or actor that
already runs in a placement group, ``use_current_placement_group=True``
places the workers there. The group must be ready within
``placement_group_timeout_s`` (TimeoutError naming the demand otherwise).

``start()`` serves the job's rendezvous store from the driver
(hvd._driver.store, with a fresh secret key), ranks the workers by node so that
the ranks of a node are consecutive, and sets in every actor's environment
the launch contract (HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE,
_CROSS_RANK, _CROSS_SIZE, HOROVOD_HOSTNAME = the Ray node id,
HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT, HVD_SECRET_KEY) plus
``extra_env_vars``; with ``executable_cls`` each actor builds one instance
(``executable_cls(*executable_args, **executable_kwargs)``). The functions
then call ``hvd.init()`` themselves, as with Horovod; hvd stays initialised
in the actors between calls.

``run(fn, args, kwargs)`` calls ``fn(*args, **kwargs)`` on every worker;
``execute(fn)`` calls ``fn(executable)``; ``execute_single(fn)`` on rank 0
only; ``run_remote`` returns the ObjectRefs without waiting. ``run`` and
``execute`` return as soon as any worker fails, raising that worker's
exception (Ray's RayTaskError, which is also an instance of the original
exception's type): the failing actor shuts hvd down first, so that peers
blocked on it in a collective fail instead of hanging. ``shutdown()`` shuts
hvd down in every actor, kills the actors, removes the placement group and
closes the store.

Not supported: the elastic arguments (``min_workers``, ``max_workers``,
``reset_limit``, ``cooldown_range``, ``elastic_timeout``,
``override_discovery``) raise ValueError (the elastic form is
:class:`ElasticRayExecutor`, hvd.ray.elastic); ``ssh_identity_file``/``ssh_str``
are accepted and unused (hvd needs no ssh under Ray).
"""
import os
import socket
import time

__all__ = ['RayExecutor', 'RayExecutorSettings', 'ElasticRayExecutor', 'ElasticRaySettings']


FAILURE_GRACE = 2.0  # seconds


def _failed_at(exc):
    cause = getattr(exc, 'cause', None)  # RayTaskError wraps the worker's exception
    for e in (cause, exc):
        t = getattr(e, 'hvd_failed_at', None)
        if isinstance(t, float):
            return t
    return float('inf')


def _first(failures):
    """The failure to raise: a rank's own exception before hvd's engine
    errors (HorovodInternalError) that follow from it on the peers, then the
    earliest."""
    from hvd.common.exceptions import HorovodInternalError
    return min(failures, key=lambda e: (isinstance(e, HorovodInternalError)
                                        or isinstance(getattr(e, 'cause', None), HorovodInternalError), _failed_at(e)))


class RayExecutorSettings:
    """What create_settings returns (Horovod's BaseSettings fields that
    matter here)."""

    def __init__(self, timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100, nics=None):
        if timeout_s <= 0:
            raise ValueError('timeout_s=%r: want a positive number of seconds' % (timeout_s,))
        if placement_group_timeout_s <= 0:
            raise ValueError('placement_group_timeout_s=%r: want a positive number of seconds' % (placement_group_timeout_s,))
        self.timeout_s = timeout_s
        self.ssh_identity_file = ssh_identity_file
        self.ssh_str = ssh_str
        self.placement_group_timeout_s = placement_group_timeout_s
        self.nics = set(nics) if nics else None


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError('hvd.ray needs ray (pip install ray): %s' % e) from None
    return ray


class _Worker:
    """The actor behind one rank (wrapped with ray.remote at start)."""

    def __init__(self):
        self.executable = None

    def node(self):
        import ray
        return ray.get_runtime_context().get_node_id(), socket.gethostname(), os.getpid()

    def setup(self, env, executable_cls, args, kwargs):
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if executable_cls is not None:
            self.executable = executable_cls(*(args or ()), **(kwargs or {}))
        return True

    def _call(self, f, *a, **kw):
        try:
            return f(*a, **kw)
        except BaseException as e:
            try:
                e.hvd_failed_at = time.time()  # the driver reports the first failure, not its echoes
            except Exception:  # noqa: B902 - an exception type without a __dict__
                pass
            self.shutdown_hvd()  # peers blocked on this rank fail instead of hanging
            raise

    def run(self, fn, args, kwargs):
        return self._call(fn, *(args or ()), **(kwargs or {}))

    def execute(self, fn):
        return self._call(fn, self.executable)

    def shutdown_hvd(self):
        try:
            from hvd.common import basics, loader
            if loader.loaded() is not None:
                basics.shutdown()
        except Exception:  # noqa: B902 - best effort
            pass
        return True


class RayExecutor:
    """Horovod's RayExecutor (see the module doc)."""

    @classmethod
    def create_settings(cls, timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                        nics=None):
        return RayExecutorSettings(timeout_s, ssh_identity_file, ssh_str, placement_group_timeout_s, nics)

    def __init__(self, settings, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_slot=None,
                 use_gpu=False, gpus_per_slot=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=1200,
                 override_discovery=True, cpus_per_worker=1, gpus_per_worker=None):
        elastic = {k: v for k, v in dict(min_workers=min_workers, max_workers=max_workers, reset_limit=reset_limit,
                                           cooldown_range=cooldown_range).items() if v is not None}
        if elastic:
            raise ValueError('hvd.ray.RayExecutor: the elastic arguments %s are not supported by RayExecutor: '
                             'use hvd.ray.ElasticRayExecutor for an elastic job' % sorted(elastic))
        if settings is None:
            settings = RayExecutorSettings()
        if (num_workers is None) == (num_hosts is None):
            raise ValueError('give either num_workers or num_hosts (with num_workers_per_host)')
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise ValueError('num_workers=%r: want a positive number of workers' % (num_workers,))
        if num_hosts is not None and (not isinstance(num_hosts, int) or num_hosts < 1 or num_workers_per_host < 1):
            raise ValueError('num_hosts=%r, num_workers_per_host=%r: want positive numbers' % (num_hosts, num_workers_per_host))
        self.settings = settings
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = num_workers if num_workers is not None else num_hosts * num_workers_per_host
        self.cpus_per_worker = cpus_per_slot if cpus_per_slot is not None else cpus_per_worker
        self.use_gpu = use_gpu
        gpus = gpus_per_slot if gpus_per_slot is not None else gpus_per_worker
        self.gpus_per_worker = (gpus if gpus is not None else 1) if use_gpu else 0
        if gpus and not use_gpu:
            raise ValueError('gpus_per_worker=%r needs use_gpu=True' % (gpus,))
        self.use_current_placement_group = use_current_placement_group
        self.workers = []
        self._pg = None
        self._own_pg = False
        self._server = None

    # -- placement ---------------------------------------------------------

    def _bundles(self):
        per = {'CPU': self.cpus_per_worker}
        if self.gpus_per_worker:
            per['GPU'] = self.gpus_per_worker
        if self.num_hosts is not None:
            host = {k: v * self.num_workers_per_host for k, v in per.items()}
            return [host] * self.num_hosts, 'STRICT_SPREAD'
        return [dict(per) for _ in range(self.num_workers)], 'PACK'

    def _placement(self, ray):
        from ray.util.placement_group import get_current_placement_group, placement_group
        current = get_current_placement_group() if self.use_current_placement_group else None
        if current is not None:
            self._pg, self._own_pg = current, False
            return
        bundles, strategy = self._bundles()
        self._pg = placement_group(bundles, strategy=strategy)
        self._own_pg = True
        ready = self._pg.ready()
        done, _ = ray.wait([ready], timeout=self.settings.placement_group_timeout_s)
        if not done:
            from ray.util.placement_group import remove_placement_group
            remove_placement_group(self._pg)
            self._pg = None
            raise TimeoutError('hvd.ray.RayExecutor: the placement group %s (%s) was not ready within %s s: the '
                               'cluster has not the resources for %d workers (%s); available: %s'
                               % (bundles, strategy, self.settings.placement_group_timeout_s, self.num_workers,
                                  self._bundles()[0][0], ray.available_resources()))

    def _bundle_of(self, i):
        if self.num_hosts is not None and self._own_pg:
            return i // self.num_workers_per_host
        if self._own_pg:
            return i
        return -1  # somewhere in the current group

    # -- life cycle ----------------------------------------------------------

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Starts the workers (see the module doc)."""
        if self.workers or self._server is not None:
            raise RuntimeError('hvd.ray.RayExecutor.start called twice: call shutdown first')
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from hvd._driver import store as _store
        from hvd._driver import worker as _worker
        if not ray.is_initialized():
            ray.init()
        try:
            self._placement(ray)
            nic = None
            if self.settings.nics:
                if len(self.settings.nics) != 1:
                    raise ValueError('nics=%r: hvd uses one interface for the job; give one' % (self.settings.nics,))
                nic = next(iter(self.settings.nics))
                addr = _store.interface_ipv4(nic)
            else:
                addr = ray.util.get_node_ip_address()
            self._server = _store.RendezvousServer(host=addr if nic else '0.0.0.0')
            opts = {'num_cpus': self.cpus_per_worker}
            if self.gpus_per_worker:
                opts['num_gpus'] = self.gpus_per_worker
            actor_cls = ray.remote(_Worker)
            workers = []
            for i in range(self.num_workers):
                strategy = PlacementGroupSchedulingStrategy(placement_group=self._pg,
                                                            placement_group_bundle_index=self._bundle_of(i))
                workers.append(actor_cls.options(scheduling_strategy=strategy, **opts).remote())
                self.workers = workers  # shutdown kills them if start fails
            nodes = ray.get([w.node.remote() for w in workers], timeout=self.settings.placement_group_timeout_s)
            # rank by node (a node's ranks consecutive), then by the order created
            order = sorted(range(len(workers)), key=lambda i: ([n[0] for n in nodes].index(nodes[i][0]), i))
            self.workers = [workers[i] for i in order]
            node_ids = [nodes[i][0] for i in order]
            hints = _worker.local_ranks(node_ids)
            envs = []
            for rank, (lr, ls, cr, cs) in enumerate(hints):
                env = {'HOROVOD_RANK': str(rank), 'HOROVOD_SIZE': str(self.num_workers),
                       'HOROVOD_LOCAL_RANK': str(lr), 'HOROVOD_LOCAL_SIZE': str(ls),
                       'HOROVOD_CROSS_RANK': str(cr), 'HOROVOD_CROSS_SIZE': str(cs),
                       'HOROVOD_HOSTNAME': node_ids[rank],
                       'HOROVOD_GLOO_RENDEZVOUS_ADDR': addr, 'HOROVOD_GLOO_RENDEZVOUS_PORT': str(self._server.port),
                       'HVD_SECRET_KEY': self._server.secret_hex,
                       'HOROVOD_GLOO_TIMEOUT_SECONDS': str(self.settings.timeout_s),
                       'RANK': None, 'WORLD_SIZE': None, 'MASTER_ADDR': None, 'MASTER_PORT': None}
                if nic:
                    env['HOROVOD_GLOO_IFACE'] = nic
                for k, v in (extra_env_vars or {}).items():
                    env[k] = None if v is None else str(v)
                envs.append(env)
            ray.get([w.setup.remote(envs[r], executable_cls, executable_args, executable_kwargs)
                     for r, w in enumerate(self.workers)])
        except BaseException:
            self.shutdown()
            raise

    def _check_started(self):
        if not self.workers:
            raise RuntimeError('hvd.ray.RayExecutor: call start() first')

    def _get(self, refs):
        """Values of refs in order. When a worker fails, the others get up
        to FAILURE_GRACE seconds to finish (its peers fail too, as hvd was
        shut down under them), and the failure that happened first is
        raised: the cause, not the peers' HorovodInternalError."""
        ray = _ray()
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except Exception as first:  # noqa: B902 - re-raised below
                failures = [first]
                if pending:
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=FAILURE_GRACE)
                    for r in more:
                        try:
                            ray.get(r)
                        except Exception as e:  # noqa: B902
                            failures.append(e)
                raise _first(failures) from None
        return ray.get(list(refs))

    def run_remote(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every worker; the ObjectRefs, by rank."""
        self._check_started()
        return [w.run.remote(fn, args, kwargs) for w in self.workers]

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """fn(*args, **kwargs) on every worker; the values, by rank."""
        if callbacks:
            raise ValueError('callbacks are not supported: fn\'s output reaches the driver through Ray\'s logs')
        return self._get(self.run_remote(fn, args, kwargs))

    def execute(self, fn, callbacks=None):
        """fn(executable) on every worker; the values, by rank."""
        if callbacks:
            raise ValueError('callbacks are not supported: fn\'s output reaches the driver through Ray\'s logs')
        self._check_started()
        return self._get([w.execute.remote(fn) for w in self.workers])

    def execute_single(self, fn):
        """fn(executable) on rank 0 only; its value."""
        self._check_started()
        return self._get([self.workers[0].execute.remote(fn)])[0]

    def shutdown(self):
        """Stops the workers, removes the placement group, closes the store.
        Safe to call more than once."""
        ray = _ray() if (self.workers or self._pg is not None) else None
        if self.workers:
            try:
                ray.wait([w.shutdown_hvd.remote() for w in self.workers], num_returns=len(self.workers), timeout=10)
            except Exception:  # noqa: B902 - dead actors are killed anyway
                pass
            for w in self.workers:
                ray.kill(w)
            self.workers = []
        if self._pg is not None and self._own_pg:
            from ray.util.placement_group import remove_placement_group
            remove_placement_group(self._pg)
        self._pg = None
        if self._server is not None:
            self._server.close()
            self._server = None


from hvd.ray.elastic import ElasticRayExecutor, ElasticRaySettings  # noqa: E402  (uses _ray above)
