"""hvd.ray.ElasticRayExecutor: Horovod's elastic Ray executor on hvd.

    import ray
    from hvd.ray import ElasticRayExecutor

    ray.init(address='auto')
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=8, elastic_timeout=60)
    executor = ElasticRayExecutor(settings, cpus_per_slot=2)
    executor.start()
    results = executor.run(train_fn)     # train_fn calls an hvd.elastic.run function

Slots come from the Ray cluster's alive nodes: ``CPU // cpus_per_slot``
per node (with ``use_gpu``, also ``GPU // gpus_per_slot``), at most
``max_num_proc`` in all. ``run`` starts one agent actor per slot
(hvd._driver.agent: ``num_cpus=cpus_per_slot``, ``num_gpus=gpus_per_slot``)
and runs hvdrun's elastic driver over them (hvd._driver.elastic), starting
with as many workers as there are slots (at least ``min_num_proc``). Every
second it looks at the cluster again: an actor that died (its node lost,
killed) is a lost host for hvdrun (its workers die with it, the survivors
reset to their last commit), and new actors are started while the cluster
has more slots than live actors, up to ``max_num_proc``; hvdrun adds them at
the workers' next commit. ``run`` returns the return values of the workers
of the last world, ordered by their final rank, and kills its actors.

Failures: hvd.runner.RunError with hvdrun's reason (fewer than
``min_num_proc`` slots within ``elastic_timeout``, ``reset_limit`` passed,
every worker failed); TimeoutError when fewer than the starting number of
agents run within ``timeout_s``. ``callbacks`` (Horovod's driver-side
reporting) is not supported (ValueError); ``ssh_identity_file`` is accepted
and unused (no ssh under Ray).
"""
import threading

__all__ = ['ElasticRayExecutor', 'ElasticRaySettings']


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError('hvd.ray needs ray (pip install ray): %s' % e) from None
    return ray


class ElasticRaySettings:
    """What ElasticRayExecutor.create_settings returns."""

    def __init__(self, min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                 ssh_identity_file=None, nics=None, verbose=1, prefix_output_with_timestamp=False, **kwargs):
        if kwargs:
            raise ValueError('ElasticRayExecutor.create_settings: unsupported arguments %s' % sorted(kwargs))
        if not isinstance(min_num_proc, int) or min_num_proc < 1:
            raise ValueError('min_num_proc=%r: want a positive number of processes' % (min_num_proc,))
        if max_num_proc is not None and (not isinstance(max_num_proc, int) or max_num_proc < min_num_proc):
            raise ValueError('max_num_proc=%r: want a number of processes >= min_num_proc=%d'
                             % (max_num_proc, min_num_proc))
        if timeout_s <= 0 or (elastic_timeout is not None and elastic_timeout <= 0):
            raise ValueError('timeout_s=%r, elastic_timeout=%r: want positive numbers of seconds'
                             % (timeout_s, elastic_timeout))
        if nics and len(list(nics)) != 1:
            raise ValueError('nics=%r: hvd uses one interface for the job; give one' % (nics,))
        self.min_num_proc, self.max_num_proc = min_num_proc, max_num_proc
        self.reset_limit, self.elastic_timeout, self.timeout_s = reset_limit, elastic_timeout, timeout_s
        self.ssh_identity_file = ssh_identity_file
        self.nics = list(nics) if nics else None
        self.verbose = verbose
        self.prefix_output_with_timestamp = prefix_output_with_timestamp


class _AgentActor:
    """The actor behind one slot (wrapped with ray.remote in run)."""

    def serve(self, job, name):
        from hvd._driver import agent
        agent.serve(job, name)
        return name


class ElasticRayExecutor:
    """See the module doc."""

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, **kwargs):
        return ElasticRaySettings(min_num_proc, max_num_proc, reset_limit, elastic_timeout, timeout_s,
                                  ssh_identity_file, nics, **kwargs)

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        if not isinstance(settings, ElasticRaySettings):
            raise ValueError('settings: want ElasticRayExecutor.create_settings(...), not %s' % type(settings).__name__)
        if not cpus_per_slot or cpus_per_slot <= 0:
            raise ValueError('cpus_per_slot=%r: want a positive number' % (cpus_per_slot,))
        if gpus_per_slot is not None and not use_gpu:
            raise ValueError('gpus_per_slot needs use_gpu=True')
        if env_vars is not None and not isinstance(env_vars, dict):
            raise ValueError('env_vars must be a dict, not %s' % type(env_vars).__name__)
        self.settings = settings
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = (gpus_per_slot or 1) if use_gpu else 0
        self.env_vars = env_vars
        self.override_discovery = override_discovery
        self._started = False

    def start(self):
        ray = _ray()
        if not ray.is_initialized():
            raise RuntimeError('ElasticRayExecutor.start: call ray.init() first')
        self._started = True

    def _slots(self, ray):
        total = 0
        for n in ray.nodes():
            if not n.get('Alive'):
                continue
            res = n.get('Resources', {})
            s = int(res.get('CPU', 0) / self.cpus_per_slot + 1e-9)
            if self.use_gpu:
                s = min(s, int(res.get('GPU', 0) / self.gpus_per_slot + 1e-9))
            total += s
        return total

    def run(self, worker_fn, callbacks=None):
        """Runs worker_fn (its training loop under hvd.elastic.run) on the
        cluster's slots; returns the results of the last world's workers by
        final rank."""
        if not self._started:
            raise RuntimeError('ElasticRayExecutor.run: call start() first')
        if callbacks:
            raise ValueError('ElasticRayExecutor.run: callbacks are not supported by hvd')
        from hvd._driver import elastic as _elastic
        ray = _ray()
        s = self.settings
        slots = self._slots(ray)
        max_np = s.max_num_proc or max(slots, s.min_num_proc)
        num_proc = max(s.min_num_proc, min(slots, max_np))
        addr = ray.util.get_node_ip_address()
        nic = s.nics[0] if s.nics else None
        if nic is not None:
            from hvd._driver import store as _store
            addr = _store.interface_ipv4(nic)
        actor_cls = ray.remote(_AgentActor)
        opts = {'num_cpus': self.cpus_per_slot, 'max_restarts': 0}
        if self.use_gpu:
            opts['num_gpus'] = self.gpus_per_slot
        agents = {}  # name -> (actor, ref)
        stop = threading.Event()
        lock = threading.Lock()
        counter = [0]

        def add(job, n):
            for _ in range(n):
                name = 'ray-%d' % counter[0]
                counter[0] += 1
                a = actor_cls.options(**opts).remote()
                agents[name] = (a, a.serve.remote(job, name))

        def watch(job):
            while not stop.wait(1.0):
                with lock:
                    refs = {ref: name for name, (_, ref) in agents.items()}
                    done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
                    for ref in done:  # an agent that returned or died: a lost host
                        name = refs[ref]
                        ray.kill(agents.pop(name)[0])
                    want = min(self._slots(ray), max_np) - len(agents)
                    if want > 0 and not stop.is_set():
                        add(job, want)

        def start_agents(job):
            with lock:
                add(job, num_proc)
            threading.Thread(target=watch, args=(job,), daemon=True).start()

        try:
            return _elastic.drive('hvd.ray.ElasticRayExecutor', start_agents, lambda: None, worker_fn, (), {},
                                  num_proc, s.min_num_proc, max_np, addr, nic, s.timeout_s, s.elastic_timeout,
                                  s.reset_limit, self.env_vars, None, None, s.verbose, s.prefix_output_with_timestamp)
        finally:
            stop.set()
            with lock:
                # the store is closed: the agents return within about 2 s; then kill the actors
                refs = [ref for _, ref in agents.values()]
                if refs:
                    ray.wait(refs, num_returns=len(refs), timeout=10)
                for a, _ in agents.values():
                    ray.kill(a)
                agents.clear()

    def shutdown(self):
        self._started = False
