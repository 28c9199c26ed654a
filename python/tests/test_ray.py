"""hvd.ray.RayExecutor on a real Ray cluster: a head node and one more node
started here with `ray start` on loopback (one CPU each, so two one-CPU
workers land on different nodes). Run by e2e/engines_ray_test.go with the
engines' virtual environment (.ci/setup.d/20-engines.sh):

    HVD_TEST_NO_INIT=1 PYTHONPATH=<hvd package>:python/tests \\
        $VENV/bin/python -m pytest python/tests/test_ray.py

Checks: two workers train the same model to identical weights, results in
rank order, one worker per node (placement) with hvd seeing two hosts;
executable_cls with execute/execute_single; an exception in a worker
surfaces in the driver without hanging and the executor runs again;
placement that cannot be satisfied times out; shutdown frees the
resources and ends the actors; at the end no Ray process is left.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ray = pytest.importorskip('ray')

from hvd.ray import RayExecutor  # noqa: E402

from test_spark_fns import fail_on_rank, train  # noqa: E402  (the same model as test_spark.py)


def _free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _procs_with(marker):
    out = []
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                with open('/proc/%s/cmdline' % d, 'rb') as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


@pytest.fixture(scope='module')
def cluster():
    tmp = tempfile.mkdtemp(prefix='hvdray-', dir='/tmp')  # short: Ray's socket paths must fit
    port = _free_port()
    bin_ray = os.path.join(os.path.dirname(sys.executable), 'ray')
    env = dict(os.environ, RAY_TMPDIR=tmp, RAY_USAGE_STATS_ENABLED='0')
    # Ray's own choice of node address (this machine's), the same for the
    # driver: forcing 127.0.0.1 on `ray start` leaves the head waiting for itself.
    common = ['--num-cpus', '1', '--num-gpus', '0',
              '--object-store-memory', str(80 << 20), '--temp-dir', tmp, '--disable-usage-stats', '--block']
    procs = []

    def start(args, name):
        log = open(os.path.join(tmp, name + '.log'), 'wb')
        procs.append(subprocess.Popen([bin_ray, 'start'] + args + common, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    start(['--head', '--port', str(port), '--include-dashboard', 'false'], 'head')
    address = '%s:%d' % (ray.util.get_node_ip_address(), port)
    def started(name):
        end = time.time() + 90
        while time.time() < end and procs[-1].poll() is None:
            with open(os.path.join(tmp, name + '.log'), errors='replace') as f:
                if 'Ray runtime started' in f.read():
                    return
            time.sleep(0.2)
        with open(os.path.join(tmp, name + '.log'), errors='replace') as f:
            raise RuntimeError('ray start (%s) did not start within 90 s:\n%s' % (name, f.read()[-3000:]))

    try:
        started('head')
        start(['--address', address], 'node2')
        started('node2')
    except BaseException:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
        raise
    try:
        ray.init(address=address, logging_level='ERROR', log_to_driver=True)
        end = time.time() + 60
        while len([n for n in ray.nodes() if n['Alive']]) < 2 and time.time() < end:
            time.sleep(0.2)
        assert len([n for n in ray.nodes() if n['Alive']]) == 2, 'the second Ray node did not join'
        yield address
    finally:
        ray.shutdown()
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.time() + 10
        while _procs_with(tmp) and time.time() < end:
            time.sleep(0.2)
        for p in procs:  # gcs_server and raylet may ignore SIGTERM while stopping
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        end = time.time() + 10
        while _procs_with(tmp) and time.time() < end:
            time.sleep(0.2)
        left = _procs_with(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, 'Ray processes left: %s' % left


def _cpus():
    return ray.available_resources().get('CPU', 0)


def _wait_cpus(n, timeout=30):
    end = time.time() + timeout
    while _cpus() < n and time.time() < end:
        time.sleep(0.1)
    return _cpus()


def test_train_two_workers(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2, cpus_per_worker=1)
    t0 = time.time()
    ex.start()
    try:
        res = ex.run(train, args=(30,))
        print('RayExecutor start + run of 2 ranks took %.2f s' % (time.time() - t0))
        assert [r[0] for r in res] == [0, 1] and all(r[1] == 2 for r in res), res
        assert res[0][2] == res[1][2], 'weights differ across ranks: %s' % res
        assert all(r[4] < r[3] / 2 for r in res), 'the loss did not fall: %s' % res

        def where():
            import ray as _ray

            import hvd.torch as hvd
            return _ray.get_runtime_context().get_node_id(), hvd.local_size(), hvd.cross_size(), os.getpid()
        places = ex.run(where)
        assert places[0][0] != places[1][0], 'both workers on one node: %s' % places
        assert [p[1:3] for p in places] == [(1, 2), (1, 2)], places
        # hvd stays initialised between calls; a second run trains again
        res2 = ex.run(train, kwargs={'steps': 5})
        assert res2[0][2] == res2[1][2]
    finally:
        ex.shutdown()
    assert _wait_cpus(2) == 2, 'shutdown left CPUs in use: %s' % ray.available_resources()
    end = time.time() + 20
    alive = [p[3] for p in places]
    while alive and time.time() < end:
        alive = [pid for pid in alive if os.path.exists('/proc/%d' % pid)]
        time.sleep(0.2)
    assert not alive, 'worker actors still running after shutdown: %s' % alive


class Model:
    def __init__(self, base):
        self.base = base
        self.calls = 0

    def step(self):
        import hvd.torch as hvd
        import torch
        hvd.init()
        self.calls += 1
        return hvd.allreduce(torch.tensor([float(self.base + hvd.rank())]), op=hvd.Sum).item(), self.calls


def test_executable_execute_and_execute_single(cluster):
    ex = RayExecutor(RayExecutor.create_settings(), num_workers=2)
    ex.start(executable_cls=Model, executable_args=(10,), extra_env_vars={'HVD_TEST_FLAG': 'x'})
    try:
        assert ex.execute(lambda m: m.step()) == [(21.0, 1), (21.0, 1)]
        assert ex.execute_single(lambda m: (m.base, m.calls)) == (10, 1)
        assert ex.run(lambda: os.environ.get('HVD_TEST_FLAG')) == ['x', 'x']
        refs = ex.run_remote(lambda a, b=0: a + b, args=(1,), kwargs={'b': 2})
        assert ray.get(refs) == [3, 3]
    finally:
        ex.shutdown()
    ex.shutdown()  # twice is fine
    with pytest.raises(RuntimeError):
        ex.run(train, args=(1,))


def test_worker_exception_surfaces(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=20), num_workers=2)
    ex.start()
    try:
        t0 = time.time()
        with pytest.raises(ValueError) as info:
            ex.run(fail_on_rank, args=(1,))
        assert 'boom on rank 1' in str(info.value), str(info.value)
        assert time.time() - t0 < 60
        # both ranks can join again
        res = ex.run(train, args=(3,))
        assert [r[0] for r in res] == [0, 1] and res[0][2] == res[1][2]
    finally:
        ex.shutdown()
    assert _wait_cpus(2) == 2


def test_placement_that_cannot_fit_times_out(cluster):
    ex = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=3), num_workers=3)
    with pytest.raises(TimeoutError) as info:
        ex.start()
    assert '3 workers' in str(info.value), str(info.value)
    ex.shutdown()
    assert _wait_cpus(2) == 2
    spread = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=3), num_hosts=1, num_workers_per_host=2)
    with pytest.raises(TimeoutError):
        spread.start()  # two CPUs on one node: no node has them
    assert _wait_cpus(2) == 2


def test_bad_arguments(cluster):
    with pytest.raises(ValueError):
        RayExecutor(RayExecutor.create_settings(), num_workers=0)
    with pytest.raises(ValueError):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, min_workers=1)
    with pytest.raises(ValueError):
        RayExecutor(RayExecutor.create_settings(), num_workers=2, gpus_per_worker=1)
    with pytest.raises(RuntimeError):
        RayExecutor(RayExecutor.create_settings(), num_workers=2).run(train)


def test_num_hosts_spreads_over_nodes(cluster):
    ex = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=30), num_hosts=2, num_workers_per_host=1)
    ex.start()
    try:
        nodes = ex.run(lambda: ray.get_runtime_context().get_node_id())
        assert len(set(nodes)) == 2, nodes
        assert [r[0] for r in ex.run(train, args=(2,))] == [0, 1]
    finally:
        ex.shutdown()
    assert _wait_cpus(2) == 2


# ElasticRayExecutor: half a CPU per slot, so the two one-CPU nodes hold 4
# slots.
from hvd.ray import ElasticRayExecutor  # noqa: E402
from hvd.runner import RunError  # noqa: E402

from test_spark_fns import check_lost_agent_rollback, elastic_train  # noqa: E402


def _check_trace(res, steps, kill_at, commit_every):
    for _, _, _, trace, batch in res:
        assert batch == steps, res
    # the oldest survivor (rank 0) went through the world of 3 to the kill,
    # then on from the last commit
    trace = res[0][3]
    first2 = [i for i, (_, s) in enumerate(trace) if s == 2][0]
    last_commit = kill_at // commit_every * commit_every
    assert trace[:first2] == [(b, 3) for b in range(kill_at)], trace
    assert trace[first2][0] == last_commit, trace


def test_elastic_killed_worker(cluster):
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, elastic_timeout=20, timeout_s=60)
    ex = ElasticRayExecutor(settings, cpus_per_slot=0.5)
    ex.start()
    t0 = time.time()
    res = ex.run(lambda: elastic_train(20, 12, 5, 3))
    print('ElasticRayExecutor with a killed worker took %.2f s' % (time.time() - t0))
    assert [r[0] for r in res] == [0, 1] and all(r[1] == 2 for r in res), res
    assert res[0][2] == res[1][2], 'weights differ on the finishing ranks: %s' % res
    _check_trace(res, 20, 12, 5)
    assert _wait_cpus(2) == 2, 'run left CPUs in use: %s' % ray.available_resources()


def test_elastic_lost_actor_replaced(cluster):
    # rank 2 kills its agent actor (a lost host); the executor starts a new
    # actor on the free slot and hvdrun grows the world back to 3
    marker = tempfile.mktemp(prefix='hvd-ray-elastic-')
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=3, elastic_timeout=20, timeout_s=60)
    ex = ElasticRayExecutor(settings, cpus_per_slot=0.5)
    ex.start()
    t0 = time.time()
    try:
        res = ex.run(lambda: elastic_train(80, 10, 4, 3, marker, True, 0.1))
    finally:
        if os.path.exists(marker):
            os.unlink(marker)
    print('ElasticRayExecutor with a lost actor took %.2f s' % (time.time() - t0))
    assert [r[0] for r in res] == [0, 1, 2] and all(r[1] == 3 for r in res), res
    assert res[0][2] == res[1][2] == res[2][2], 'weights differ on the finishing ranks: %s' % res
    # rank 2's actor died starting step 10: rank 0 rolled back to the last
    # commit before the failure; the new actor joins at once or at a later
    # commit
    trace = res[0][3]
    check_lost_agent_rollback(trace, 10, 4, 80)
    assert trace[-1][1] == 3
    assert all(r[4] == 80 for r in res)
    assert _wait_cpus(2) == 2, 'run left CPUs in use: %s' % ray.available_resources()


def test_elastic_min_num_proc_not_met(cluster):
    settings = ElasticRayExecutor.create_settings(min_num_proc=2, max_num_proc=2, elastic_timeout=3, timeout_s=60)
    ex = ElasticRayExecutor(settings, cpus_per_slot=1)
    ex.start()
    t0 = time.time()
    with pytest.raises(RunError) as info:
        ex.run(lambda: elastic_train(20, 3, 5, 2))
    took = time.time() - t0
    assert 'fewer than --min-np 2' in str(info.value), str(info.value)
    assert took < 45, took
    assert _wait_cpus(2) == 2
    with pytest.raises(ValueError):
        ElasticRayExecutor.create_settings(min_num_proc=3, max_num_proc=2)
