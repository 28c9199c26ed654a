"""The agents behind hvd.spark.run_elastic and hvd.ray.ElasticRayExecutor
(hvd.spark.agent) and hvdrun's ssh stand-in for them (hvd.spark.agent_ssh),
with Debian's Python only (no engine): an agent process serving a driver
store here, the stand-in run as hvdrun runs ssh. Run by e2e TestSparkAgent:

    HVD_TEST_NO_INIT=1 PYTHONPATH=<hvd package>:python/tests python3 -m pytest python/tests/test_spark_agent.py

Checks: stdin, stdout, stderr and the exit status relayed as ssh does; a
wrong secret or an unknown agent -> 255 without running anything; stopping
the stand-in stops the script; an agent killed -> the stand-in exits 255 and
the agent's script dies with it; the agent stops when the store closes.
"""
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from hvd.spark import agent as _agent
from hvd.spark import store as _store


def _alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def _wait(pred, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.fixture
def agent():
    server = _store.RendezvousServer(host='127.0.0.1')
    work = tempfile.mkdtemp(prefix='hvd-agent-test-')
    job = {'addr': '127.0.0.1', 'port': server.port, 'secret': server.secret_hex, 'env': {}, 'pythonpath': None}
    jobfile = os.path.join(work, 'job')
    with open(jobfile, 'wb') as f:
        pickle.dump(job, f)
    proc = subprocess.Popen([sys.executable, '-c', 'import pickle, sys; from hvd.spark import agent; '
                             'agent.serve(pickle.load(open(sys.argv[1], "rb")), "a0")', jobfile])
    assert _wait(lambda: server.keys(_agent.AGENT_SCOPE) == ['a0']), 'the agent did not register'
    info = json.loads(server.get(_agent.AGENT_SCOPE, 'a0').decode())
    table = os.path.join(work, 'table.json')
    with open(table, 'w') as f:
        json.dump({'a0': [info['addr'], info['port']]}, f)

    class A:
        pass
    a = A()
    a.server, a.proc, a.table, a.secret = server, proc, table, server.secret_hex

    def ssh(host, script, stdin=b'', secret=None, wait=True):
        env = dict(os.environ, HVD_AGENT_TABLE=table, HVD_AGENT_SECRET=secret or a.secret)
        p = subprocess.Popen([sys.executable, '-m', 'hvd.spark.agent_ssh', '-o', 'ConnectTimeout=5', host, script],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if not wait:
            p.stdin.write(stdin)
            p.stdin.flush()
            return p
        out, err = p.communicate(stdin, timeout=30)
        return p.returncode, out.decode(), err.decode()
    a.ssh = ssh
    yield a
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    server.close()


def test_relays_stdin_output_and_status(agent):
    code, out, err = agent.ssh('a0', 'read -r L; echo "got $L"; echo to-err >&2; exit 7', b'hello\n')
    assert (code, out, err) == (7, 'got hello\n', 'to-err\n')
    # the agent's variables reach the script (the worker finds the driver's store there)
    code, out, _ = agent.ssh('a0', 'echo "$HVD_AGENT_NAME $HVD_AGENT_STORE"')
    assert (code, out) == (0, 'a0 127.0.0.1:%d\n' % agent.server.port)


def test_wrong_secret_and_unknown_agent(agent):
    code, out, err = agent.ssh('a0', 'echo ran', secret='00' * 32)
    assert code == 255 and 'ran' not in out, (code, out, err)
    code, out, err = agent.ssh('nope', 'echo ran')
    assert code == 255 and 'no such agent' in err and 'known: a0' in err, err


def test_stopping_the_standin_stops_the_script(agent):
    p = agent.ssh('a0', 'echo $$; exec sleep 60', wait=False)
    pid = int(p.stdout.readline())
    assert _alive(pid)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 128 + signal.SIGTERM
    assert _wait(lambda: not _alive(pid)), 'the script outlived its stand-in'


def test_agent_killed(agent):
    p = agent.ssh('a0', 'echo $$; exec sleep 60', wait=False)
    pid = int(p.stdout.readline())
    agent.proc.kill()
    assert p.wait(10) == 255
    assert 'lost the connection to the agent' in p.stderr.read().decode()
    assert _wait(lambda: not _alive(pid)), 'the script outlived its agent'


def test_agent_stops_when_the_store_closes(agent):
    agent.server.close()
    assert agent.proc.wait(10) == 0
