"""hvd.run (Horovod's horovod.run): run by the driver process itself, not
under hvdrun:

    HVD_TEST_NO_INIT=1 PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests/test_run.py

hvdrun is found as hvd.run finds it (HVD_HVDRUN, next to the interpreter,
the source tree's bin/, PATH). The functions the workers run are defined at
module level so that they travel by reference when cloudpickle is missing.
"""
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import pytest

import hvd
from hvd.runner import RunError, find_hvdrun

try:
    import cloudpickle  # noqa: F401
    HAVE_CLOUDPICKLE = True
except ImportError:
    HAVE_CLOUDPICKLE = False


def _env_rank():
    return int(os.environ['HOROVOD_RANK'])


def allreduce_rank(tag, scale=1, offset=0):
    import numpy as np
    import hvd.numpy as h
    h.init()
    total = h.allreduce(np.array([float(h.rank())]), op=h.Sum)
    out = {'rank': h.rank(), 'size': h.size(), 'tag': tag, 'scale': scale, 'offset': offset,
           'sum': float(total[0]), 'array': np.arange(3) * h.rank()}
    h.shutdown()
    return out


def raise_on(bad_rank):
    import numpy as np
    import hvd.numpy as h
    h.init()
    if h.rank() == bad_rank:
        raise ValueError('boom on rank %d' % bad_rank)
    # The others wait in a collective the failed rank never joins.
    h.allreduce(np.ones(4), name='never_completes')
    return 'unreachable'


def exit_hard_on(bad_rank, code):
    if _env_rank() == bad_rank:
        os._exit(code)
    import time
    time.sleep(60)  # hvdrun stops this rank when the other dies
    return 'slept'


def exit_cleanly_on(bad_rank):
    if _env_rank() == bad_rank:
        sys.exit(0)
    return _env_rank()


def unpicklable_result():
    return threading.Lock()


def print_and_return():
    print('hello from rank %d' % _env_rank())
    print('to stderr from rank %d' % _env_rank(), file=sys.stderr)
    return _env_rank()


class CustomError(Exception):
    def __init__(self, a, b):  # cannot be rebuilt by pickle from its args
        super().__init__('custom %s/%s' % (a, b))


def raise_custom():
    raise CustomError(1, 2)


@pytest.fixture(autouse=True)
def _private_run_dir(tmp_path, monkeypatch):
    """Every run's temporary directory goes under a directory of its own,
    which must be empty again afterwards (no leaked payloads or results)."""
    runs = tmp_path / 'runs'
    runs.mkdir()
    monkeypatch.setenv('HVD_RUN_DIR', str(runs))
    yield
    assert os.listdir(str(runs)) == [], 'hvd.run left files behind'


def test_hvd_run_is_exported():
    assert hvd.run is hvd.runner.run
    assert os.access(find_hvdrun(), os.X_OK)


@pytest.mark.parametrize('np_', [2, 3])
def test_results_ordered_by_rank(np_):
    res = hvd.run(allreduce_rank, args=('t',), kwargs={'scale': 2.5, 'offset': -1}, num_proc=np_)
    assert isinstance(res, list) and len(res) == np_
    want_sum = float(sum(range(np_)))
    for r, out in enumerate(res):
        assert out['rank'] == r and out['size'] == np_
        assert (out['tag'], out['scale'], out['offset']) == ('t', 2.5, -1)
        assert out['sum'] == want_sum
        assert out['array'].tolist() == [0, r, 2 * r]


def test_default_is_one_process():
    res = hvd.run(allreduce_rank, args=('one',))
    assert [(o['rank'], o['size'], o['sum']) for o in res] == [(0, 1, 0.0)]


def test_deprecated_np_spelling():
    with pytest.warns(DeprecationWarning, match='np is deprecated'):
        res = hvd.run(allreduce_rank, args=('x',), np=2)
    assert [o['rank'] for o in res] == [0, 1]


@pytest.mark.parametrize('np_,bad', [(2, 1), (3, 0), (3, 2)])
def test_exception_on_one_rank(np_, bad):
    with pytest.raises(RunError) as info:
        hvd.run(raise_on, args=(bad,), num_proc=np_)
    e = info.value
    assert isinstance(e, RuntimeError)  # what Horovod raises
    assert e.rank == bad
    assert 'rank %d' % bad in str(e) and 'ValueError: boom on rank %d' % bad in str(e)
    assert isinstance(e.exception, ValueError) and str(e.exception) == 'boom on rank %d' % bad
    assert e.__cause__ is e.exception
    assert 'in raise_on' in e.remote_traceback and 'in raise_on' in str(e)


def test_first_failure_prefers_the_cause_over_its_echoes():
    """A rank's own exception is reported over hvd's engine errors on the
    peers that its exit caused, even when a peer's record is earlier (clocks
    of two hosts, or a record taken late); among equals the earliest, then
    the lowest rank."""
    from hvd.common.exceptions import HorovodInternalError
    from hvd.runner.task import error_record, first_failure
    echo = error_record(0, HorovodInternalError('allreduce never: rank 1: closed the communicator (shut down)'),
                        None, when=100.0)
    cause = error_record(1, ValueError('boom on rank 1'), None, when=100.5)
    ok = {'ok': True, 'rank': 2, 'value': 2}
    assert echo['consequence'] and not cause['consequence']
    assert first_failure({0: echo, 1: cause, 2: ok}) == (1, cause)
    assert first_failure({0: echo, 2: ok}) == (0, echo)  # only echoes: the earliest of them
    late = error_record(2, KeyError('later'), None, when=101.0)
    assert first_failure({0: echo, 1: cause, 2: late})[0] == 1
    tie = error_record(0, KeyError('same time'), None, when=100.5)
    assert first_failure({1: cause, 0: tie})[0] == 0
    assert first_failure({2: ok}) is None


def test_exception_that_cannot_be_rebuilt():
    with pytest.raises(RunError, match=r'rank [01] \(.*\) raised .*CustomError: custom 1/2') as info:
        hvd.run(raise_custom, num_proc=2)
    assert info.value.exception is None and 'raise_custom' in info.value.remote_traceback


def test_hard_exit_fails_the_run():
    with pytest.raises(RunError) as info:
        hvd.run(exit_hard_on, args=(1, 7), num_proc=3)
    e = info.value
    assert e.rank == 1 and e.exit_code == 7 and e.exception is None
    assert 'rank 1' in str(e) and 'exited with status 7' in str(e)


def test_clean_sys_exit_returns_none():
    assert hvd.run(exit_cleanly_on, args=(0,), num_proc=2) == [None, 1]


def test_unpicklable_return_value():
    with pytest.raises(RunError, match='cannot be pickled') as info:
        hvd.run(unpicklable_result, num_proc=2)
    assert info.value.rank in (0, 1)


def test_worker_output_is_forwarded(capsys):
    assert hvd.run(print_and_return, num_proc=2) == [0, 1]
    out, err = capsys.readouterr()
    for r in (0, 1):
        assert 'hello from rank %d' % r in out
        assert 'to stderr from rank %d' % r in err
    assert '[1]<stdout>:hello from rank 1' in out


def test_lambda():
    if HAVE_CLOUDPICKLE:
        assert hvd.run(lambda x: x * 2, args=(21,), num_proc=2) == [42, 42]
    else:
        with pytest.raises(TypeError, match='cloudpickle'):
            hvd.run(lambda x: x * 2, args=(21,), num_proc=2)


@pytest.mark.parametrize('kwargs,match', [
    ({'use_mpi': True}, 'no MPI controller'),
    ({'use_mpi': True, 'use_gloo': True}, 'only allow one'),
    ({'min_num_proc': 1}, 'elastic'),
    ({'min_np': 1, 'max_np': 4}, 'elastic'),
    ({'hosts': 'localhost:2', 'hostfile': 'f'}, 'only allow one'),
    ({'num_proc': 0}, 'positive integer'),
    ({'num_proc': '2'}, 'positive integer'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        hvd.run(allreduce_rank, args=('x',), **kwargs)


def test_not_callable():
    with pytest.raises(TypeError, match='callable'):
        hvd.run(42)


def test_hvdrun_refuses_the_job():
    # More ranks than slots: hvdrun's own error comes back in the message.
    with pytest.raises(RunError, match='hvdrun exited with status 2') as info:
        hvd.run(allreduce_rank, args=('x',), num_proc=3, hosts='localhost:1')
    assert info.value.rank is None and info.value.exit_code == 2


def test_hvdrun_not_found(monkeypatch):
    monkeypatch.setenv('HVD_HVDRUN', '/nonexistent/hvdrun')
    with pytest.raises(FileNotFoundError, match='HVD_HVDRUN=/nonexistent/hvdrun'):
        hvd.run(allreduce_rank, args=('x',))


def test_hosts_and_flags_reach_hvdrun(tmp_path):
    """-H localhost:2, --output-filename and --verbose are passed on."""
    out = tmp_path / 'out'
    try:
        res = hvd.run(print_and_return, num_proc=2, hosts='localhost:2', output_filename=str(out), verbose=True,
                      start_timeout=20, disable_cache=True)
        assert res == [0, 1]
        assert sorted(os.listdir(str(out))) == ['rank.0', 'rank.1']
        with open(str(out / 'rank.1' / 'stdout')) as f:
            assert 'hello from rank 1' in f.read()
    finally:
        import shutil
        shutil.rmtree(str(out), ignore_errors=True)


def test_function_of_the_main_script(tmp_path):
    """A script's own function: by value with cloudpickle, else imported
    from the script as __mp_main__ (the entry point is guarded)."""
    script = tmp_path / 'job.py'
    script.write_text(textwrap.dedent('''
        import os
        import hvd

        def work(base):
            return base + int(os.environ['HOROVOD_RANK'])

        if __name__ == '__main__':
            print('RESULT', hvd.run(work, args=(10,), num_proc=3))
    '''))
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(hvd.__file__)),
                                                     env.get('PYTHONPATH')] if p)
    env['HVD_RUN_DIR'] = str(tmp_path / 'runs-main')
    os.mkdir(env['HVD_RUN_DIR'])
    try:
        p = subprocess.run([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120, cwd=str(tmp_path))
        assert p.returncode == 0, p.stdout.decode()
        assert 'RESULT [10, 11, 12]' in p.stdout.decode()
        assert os.listdir(env['HVD_RUN_DIR']) == []
    finally:
        import shutil
        shutil.rmtree(env['HVD_RUN_DIR'], ignore_errors=True)
        os.remove(str(script))


def test_payload_is_pickle_readable(tmp_path):
    """The header a worker reads first is plain pickle (the call inside may
    be cloudpickle): a worker without cloudpickle can still report why it
    cannot load func."""
    from hvd import runner
    data = pickle.dumps({'main': None, 'call': runner._dumps((allreduce_rank, ('x',), {}))})
    header = pickle.loads(data)
    func, args, kwargs = pickle.loads(header['call'])
    assert func is allreduce_rank and args == ('x',) and kwargs == {}


def test_find_hvdrun_order(tmp_path):
    """HVD_HVDRUN, then DIR/bin beside an installed DIR/hvd, then PATH."""
    import shutil
    site = tmp_path / 'site'
    shutil.copytree(os.path.dirname(hvd.__file__), str(site / 'hvd'),
                    ignore=shutil.ignore_patterns('*.so', '__pycache__'))
    fakes = {}
    for where in ('site/bin', 'onpath', 'explicit'):
        d = tmp_path / where
        d.mkdir(parents=True)
        fakes[where] = str(d / 'hvdrun')
        with open(fakes[where], 'w') as f:
            f.write('#!/bin/sh\nexit 0\n')
        os.chmod(fakes[where], 0o755)
    env = {k: v for k, v in os.environ.items() if k != 'HVD_HVDRUN'}
    env['PYTHONPATH'] = str(site)
    env['PATH'] = str(tmp_path / 'onpath') + os.pathsep + env.get('PATH', '')

    def found(extra):
        e = dict(env, **extra)
        p = subprocess.run([sys.executable, '-c', 'from hvd.runner import find_hvdrun; print(find_hvdrun())'],
                           env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        return p.stdout.decode().strip()

    assert found({'HVD_HVDRUN': fakes['explicit']}) == fakes['explicit']
    assert found({}) == fakes['site/bin']
    os.remove(fakes['site/bin'])
    if not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(sys.executable)), 'hvdrun')):
        assert found({}) == fakes['onpath']


def test_interrupt_stops_the_job(tmp_path):
    """Ctrl-C in the driver stops hvdrun and every worker, and the run
    directory is still removed."""
    import signal
    import time
    script = tmp_path / 'job.py'
    pids = tmp_path / 'pids'
    pids.mkdir()
    script.write_text(textwrap.dedent('''
        import os, sys, time
        import hvd

        def sleeper(d):
            with open(os.path.join(d, os.environ['HOROVOD_RANK']), 'w') as f:
                f.write(str(os.getpid()))
            time.sleep(120)

        if __name__ == '__main__':
            try:
                hvd.run(sleeper, args=(sys.argv[1],), num_proc=2)
            except KeyboardInterrupt:
                print('INTERRUPTED')
    '''))
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(hvd.__file__)),
                                                     env.get('PYTHONPATH')] if p)
    runs = tmp_path / 'runs-int'
    runs.mkdir()
    env['HVD_RUN_DIR'] = str(runs)
    p = subprocess.Popen([sys.executable, str(script), str(pids)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, cwd=str(tmp_path))
    try:
        deadline = time.time() + 60
        while len(os.listdir(str(pids))) < 2 and time.time() < deadline:
            time.sleep(0.05)
        workers = [int(open(str(pids / f)).read()) for f in os.listdir(str(pids))]
        assert len(workers) == 2, 'workers did not start'
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert b'INTERRUPTED' in out, out.decode()
    for pid in workers:
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, 'worker %d survived the interrupt' % pid
    assert os.listdir(str(runs)) == []
