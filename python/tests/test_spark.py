"""hvd.spark.run on a real Spark (pyspark from PyPI, Debian's Java): in
local[2] and on a standalone cluster (a master and two one-core workers
started here on loopback). Run by e2e/engines_spark_test.go with the
engines' virtual environment (.ci/setup.d/20-engines.sh):

    HVD_TEST_NO_INIT=1 PYTHONPATH=<hvd package>:python/tests \\
        $VENV/bin/python -m pytest python/tests/test_spark.py

Each test checks what a user relies on: results ordered by rank, identical
trained weights on every rank, forwarded output, a raising rank failing the
run with its message (and no hang), too few slots failing within
start_timeout; at the end no process started here is left.
"""
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

pyspark = pytest.importorskip('pyspark')
if shutil.which('java') is None and not os.environ.get('JAVA_HOME'):
    pytest.skip('no java on PATH and no JAVA_HOME (apt-get install openjdk-17-jre-headless)', allow_module_level=True)

import hvd.spark  # noqa: E402
from hvd.runner import RunError  # noqa: E402

from test_spark_fns import fail_on_rank, train  # noqa: E402


def _free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _descendants():
    """pids of this process's descendants (from /proc)."""
    parent = {}
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                with open('/proc/%s/stat' % d) as f:
                    parent[int(d)] = int(f.read().rsplit(')', 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [os.getpid()]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in out:
                out.add(c)
                todo.append(c)
    return out


def _spark_home():
    return os.path.dirname(pyspark.__file__)


class _Cluster:
    """A standalone master and two one-core workers on loopback."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix='hvd-spark-')
        self.procs = []
        self.port = _free_port()
        cls = os.path.join(_spark_home(), 'bin', 'spark-class')
        env = dict(os.environ, SPARK_LOCAL_IP='127.0.0.1', SPARK_LOG_DIR=self.dir, SPARK_WORKER_DIR=self.dir)
        self._start([cls, 'org.apache.spark.deploy.master.Master', '--host', '127.0.0.1', '--port', str(self.port),
                     '--webui-port', str(_free_port())], env, 'master')
        self.url = 'spark://127.0.0.1:%d' % self.port
        self._wait_port(self.port)
        for i in range(2):
            self._start([cls, 'org.apache.spark.deploy.worker.Worker', self.url, '--host', '127.0.0.1', '--cores', '1',
                         '--memory', '1g', '--webui-port', str(_free_port()), '--work-dir', self.dir], env, 'worker%d' % i)

    def _start(self, argv, env, name):
        log = open(os.path.join(self.dir, name + '.log'), 'wb')
        self.procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_port(self, port):
        end = time.time() + 60
        while time.time() < end:
            with socket.socket() as s:
                if s.connect_ex(('127.0.0.1', port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError('the Spark master did not listen on %d within 60 s:\n%s' % (port, self.logs()))

    def logs(self):
        out = []
        for n in sorted(os.listdir(self.dir)):
            if n.endswith('.log'):
                with open(os.path.join(self.dir, n), errors='replace') as f:
                    out.append('--- %s\n%s' % (n, ''.join(f.readlines()[-20:])))
        return '\n'.join(out)

    def stop(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope='module', params=['local', 'standalone'])
def sc(request):
    from pyspark import SparkContext
    before = _descendants()
    cluster = _Cluster() if request.param == 'standalone' else None
    conf = spark_conf('hvd-test-spark')
    if cluster is None:
        conf.setMaster('local[2]')
    else:
        conf.setMaster(cluster.url).set('spark.executor.memory', '512m').set('spark.cores.max', '2')
    try:
        ctx = SparkContext(conf=conf)
    except BaseException:
        if cluster:
            print(cluster.logs())
            cluster.stop()
        raise
    ctx.setLogLevel('ERROR')
    if cluster is not None:
        # wait for both executors to register (each worker has one core)
        end = time.time() + 120
        while ctx._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.time() < end:  # + the driver
            time.sleep(0.2)
    ctx.mode = request.param
    yield ctx
    stop_context(ctx)
    if cluster is not None:
        cluster.stop()
    check_nothing_left(before, request.param)


def spark_conf(app):
    """The SparkConf the Spark suites start from: a driver on loopback, this
    interpreter for the executors (PYSPARK_PYTHON too), the tests' PYTHONPATH,
    and hvd not initialized by their conftest."""
    from pyspark import SparkConf
    os.environ['PYSPARK_PYTHON'] = sys.executable  # the executors' Python: this venv's
    return (SparkConf().setAppName(app)
            .set('spark.ui.enabled', 'false')
            .set('spark.driver.host', '127.0.0.1')
            .set('spark.driver.bindAddress', '127.0.0.1')
            .set('spark.executorEnv.PYTHONPATH', os.environ.get('PYTHONPATH', ''))
            .set('spark.executorEnv.HVD_TEST_NO_INIT', '1')
            .set('spark.pyspark.python', sys.executable)
            .set('spark.pyspark.driver.python', sys.executable))


def stop_context(ctx):
    """Stops ctx, its JVM and the gateway, so that the next SparkContext
    of this process starts a fresh one."""
    ctx.stop()
    ctx._gateway.shutdown()
    proc = getattr(ctx._gateway, 'proc', None)
    if proc is not None:
        proc.stdin.close() if proc.stdin else None
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    from pyspark import SparkContext as _SC
    _SC._gateway = None
    _SC._jvm = None


def check_nothing_left(before, what):
    """Asserts that no process started since before (a _descendants() set)
    outlives Spark, waiting up to 30 s for them to exit."""
    end = time.time() + 30
    while _descendants() - before and time.time() < end:
        time.sleep(0.2)
    left = _descendants() - before
    assert not left, 'processes left after stopping Spark (%s): %s' % (what, sorted(left))


def test_train_results_ordered_and_identical(sc):
    out, err = io.StringIO(), io.StringIO()
    t0 = time.time()
    res = hvd.spark.run(train, args=(30,), num_proc=2, stdout=out, stderr=err)
    assert [r[0] for r in res] == [0, 1] and all(r[1] == 2 for r in res), res
    assert res[0][2] == res[1][2], 'weights differ across ranks: %s' % res
    assert all(r[4] < r[3] / 2 for r in res), 'the loss did not fall: %s' % res
    for r in range(2):
        assert '[%d]<stdout>:rank %d trained 30 steps\n' % (r, r) in out.getvalue(), out.getvalue()
    print('%s: hvd.spark.run of 2 ranks took %.2f s' % (sc.mode, time.time() - t0))


def test_default_num_proc_is_default_parallelism(sc):
    if sc.mode != 'local':
        pytest.skip('local mode covers it; the standalone run tests the cluster path only')
    assert sc.defaultParallelism == 2
    res = hvd.spark.run(train, args=(2,), stdout=io.StringIO())
    assert [r[0] for r in res] == [0, 1]


def test_raising_rank_fails_the_run_with_its_message(sc):
    t0 = time.time()
    with pytest.raises(RunError) as info:
        hvd.spark.run(fail_on_rank, args=(1,), num_proc=2, stdout=io.StringIO(), stderr=io.StringIO())
    msg = str(info.value)
    assert 'rank 1' in msg and 'ValueError' in msg and 'boom on rank 1' in msg, msg
    assert info.value.rank == 1 and isinstance(info.value.exception, ValueError)
    assert time.time() - t0 < 60, 'the failure took %.1f s to surface' % (time.time() - t0)
    # the same executors run the next job
    assert [r[0] for r in hvd.spark.run(train, args=(2,), num_proc=2, stdout=io.StringIO())] == [0, 1]


def test_too_few_slots_times_out(sc):
    if sc.mode != 'local':
        pytest.skip('local mode covers it; the standalone run tests the cluster path only')
    t0 = time.time()
    with pytest.raises(TimeoutError) as info:
        hvd.spark.run(train, args=(2,), num_proc=3, start_timeout=4, stdout=io.StringIO())
    assert 'num_proc=3' in str(info.value), str(info.value)
    assert time.time() - t0 < 60
    assert [r[0] for r in hvd.spark.run(train, args=(2,), num_proc=2, stdout=io.StringIO())] == [0, 1]


def test_bad_arguments(sc):
    with pytest.raises(ValueError):
        hvd.spark.run(train, num_proc=0)
    with pytest.raises(ValueError):
        hvd.spark.run(train, num_proc=2, nics=['lo', 'eth0'])


def _env_probe(name):
    import os
    print('probe')
    return os.environ.get(name), os.environ.get('HOROVOD_RANK')


def test_env_output_timestamps(sc):
    if sc.mode != 'local':
        pytest.skip('local mode covers it')
    out = io.StringIO()
    res = hvd.spark.run(_env_probe, args=('HVD_TEST_SPARK_ENV',), num_proc=2, env={'HVD_TEST_SPARK_ENV': 'yes'},
                        stdout=out, prefix_output_with_timestamp=True)
    assert res == [('yes', '0'), ('yes', '1')], res
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(re.match(r'^\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4} \[[01]\]<stdout>:probe$', ln)
                                   for ln in lines), lines
    # the variables are the run's only: the reused Python workers do not keep them
    assert hvd.spark.run(_env_probe, args=('HVD_TEST_SPARK_ENV',), num_proc=2, stdout=io.StringIO()) == [
        (None, '0'), (None, '1')]
