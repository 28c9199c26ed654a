"""The driver side shared by hvd.spark.run_elastic and
hvd.ray.ElasticRayExecutor: hvdrun's elastic driver over agents.

:func:`drive` serves a store for the agents (hvd._driver.agent) and the
results, has the engine start the agents (one slot each), waits until
``num_proc`` of them registered, then runs ``hvdrun -np num_proc --min-np
... --max-np ... --host-discovery-script <script>`` whose script prints the
agents whose heartbeat is fresh (``<name>:1``), with ``HVD_SSH`` pointing at
the agent stand-in (hvd._driver.agent_ssh). hvdrun runs the elastic job as
everywhere else (docs/elastic.md): a worker that dies fails and blacklists
its agent, the survivors reset to the last commit and go on while at least
``min_num_proc`` remain; an agent that is lost (task, actor, node) drops out
of discovery, and new agents are added up to ``max_num_proc``. The workers'
return values come back through the store; :func:`drive` returns those of
the workers of the last world, ordered by their final rank.
"""
import collections
import json
import os
import pickle
import shlex
import subprocess
import sys
import tempfile
import threading
import time

from hvd._driver import agent as _agent
from hvd._driver import store as _store

STALE_S = 5.0


def _dumps(obj):
    try:
        import cloudpickle
    except ImportError:
        from pyspark import cloudpickle
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def nic_of(addr):
    """The name of the interface holding IPv4 address addr (a loopback
    address: 'lo'); None when none does."""
    import socket
    try:
        ip = socket.gethostbyname(addr)
    except OSError:
        return None
    if ip.startswith('127.'):
        return 'lo'
    for _, name in socket.if_nameindex():
        try:
            if _store.interface_ipv4(name) == ip:
                return name
        except ValueError:
            continue
    return None


def check_args(num_proc, min_num_proc, max_num_proc, who):
    if num_proc is None:
        raise ValueError('%s: num_proc is required' % who)
    for name, v in (('num_proc', num_proc), ('min_num_proc', min_num_proc), ('max_num_proc', max_num_proc)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError('%s: %s=%r: want a positive number of processes' % (who, name, v))
    if not min_num_proc <= num_proc <= max_num_proc:
        raise ValueError('%s: want min_num_proc <= num_proc <= max_num_proc, got %d, %d, %d'
                         % (who, min_num_proc, num_proc, max_num_proc))


class _Lines:
    """Writes hvdrun's output lines to a stream (optionally timestamped),
    keeping the last lines."""

    def __init__(self, sink, timestamps, keep):
        self.sink, self.timestamps, self.keep = sink, timestamps, keep

    def pump(self, stream):
        for raw in iter(stream.readline, b''):
            line = raw.decode('utf-8', 'replace')
            if self.keep is not None:
                self.keep.append(line.rstrip('\n'))
            if self.timestamps:
                line = time.strftime('%a %b %d %H:%M:%S %Y') + ' ' + line
            sink = self.sink() if callable(self.sink) else self.sink
            try:
                sink.write(line)
                sink.flush()
            except (ValueError, OSError):
                pass
        stream.close()


def drive(who, start_agents, engine_error, fn, args, kwargs, num_proc, min_num_proc, max_num_proc, addr, nic,
          start_timeout, elastic_timeout, reset_limit, env, stdout, stderr, verbose, timestamps):
    """Runs the elastic job; see the module doc. start_agents(job) starts
    the engine's agents (in the background); engine_error() returns an
    exception when the engine failed (None otherwise). Returns the results
    by final rank; raises hvd.runner.RunError when hvdrun fails."""
    from hvd import runner
    from hvd.runner import RunError
    hvdrun = runner.find_hvdrun()
    if nic is None:
        nic = nic_of(addr)
        if nic is None:
            raise ValueError('%s: no network interface holds the driver address %s; give nics=[<interface>]'
                             % (who, addr))
    server = _store.RendezvousServer(host='0.0.0.0')
    hvd_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # hvd's own parent first (the stand-in and the workers import hvd), then the inherited path
    pythonpath = os.pathsep.join([hvd_parent] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep)
                                                 if p and p != hvd_parent])
    # the workers read the function from the store: nothing is written on the engine's machines
    server.put(_agent.PAYLOAD_SCOPE, _agent.PAYLOAD_KEY, _dumps((fn, tuple(args), dict(kwargs or {}))))
    job = {'addr': addr, 'port': server.port, 'secret': server.secret_hex, 'env': env, 'pythonpath': pythonpath}
    work = tempfile.mkdtemp(prefix='hvd-elastic-driver-')
    table_path = os.path.join(work, 'agents.json')
    hosts_path = os.path.join(work, 'hosts')
    script = os.path.join(work, 'discover.sh')
    with open(script, 'w') as f:
        f.write('#!/bin/sh\ncat %s\n' % shlex.quote(hosts_path))
    os.chmod(script, 0o700)
    seen = {}  # name -> (value, driver time it last changed)
    stop = threading.Event()

    def write_atomic(path, text):
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, path)

    def refresh():
        now = time.monotonic()
        table = {}
        for name in server.keys(_agent.AGENT_SCOPE):
            v = server.get(_agent.AGENT_SCOPE, name)
            if name not in seen or seen[name][0] != v:
                seen[name] = (v, now)
            info = json.loads(v.decode())
            table[name] = [info['addr'], info['port']]
        live = sorted((n for n, (_, t) in seen.items() if now - t < STALE_S),
                      key=lambda n: (len(n), n))
        write_atomic(table_path, json.dumps(table))
        write_atomic(hosts_path, ''.join('%s:1\n' % n for n in live))
        return live

    def refresher():
        while not stop.wait(0.5):
            try:
                refresh()
            except Exception:  # noqa: B902 - next round
                pass

    proc = None
    tail = collections.deque(maxlen=60)
    try:
        start_agents(job)
        t0 = time.monotonic()
        while True:
            live = refresh()
            if len(live) >= num_proc:
                break
            err = engine_error()
            if err is not None:
                raise RunError('%s: the engine failed before %d agents started: %s' % (who, num_proc, err)) from err
            if time.monotonic() - t0 > start_timeout:
                raise TimeoutError('%s: timed out after %.0f s waiting for %d agents to start (%d did: %s); '
                                   'the cluster has too few free slots, or they cannot reach the driver at %s:%d'
                                   % (who, start_timeout, num_proc, len(live), ', '.join(live) or 'none',
                                      addr, server.port))
            time.sleep(0.1)
        if verbose >= 2:
            sys.stderr.write('%s: %d agents up after %.2f s: %s\n' % (who, len(live), time.monotonic() - t0, live))
        threading.Thread(target=refresher, daemon=True).start()
        cmd = [hvdrun, '-np', str(num_proc), '--min-np', str(min_num_proc), '--max-np', str(max_num_proc),
               '--host-discovery-script', script, '--network-interfaces', nic,
               '--start-timeout', str(max(1, int(start_timeout)))]
        if elastic_timeout is not None:
            cmd += ['--elastic-timeout', str(max(1, int(elastic_timeout)))]
        if reset_limit is not None:
            cmd += ['--reset-limit', str(int(reset_limit))]
        if verbose >= 2:
            cmd.append('--verbose')
        cmd += ['sh', '-c', 'exec "$HVD_AGENT_PYTHON" -m hvd._driver.elastic_worker']
        penv = dict(os.environ)
        penv.update({'HVD_SSH': '%s -m hvd._driver.agent_ssh' % sys.executable, 'HVD_AGENT_TABLE': table_path,
                     'HVD_AGENT_SECRET': server.secret_hex, 'PYTHONPATH': pythonpath})
        proc = subprocess.Popen(cmd, env=penv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        pumps = [threading.Thread(target=_Lines(stdout or (lambda: sys.stdout), timestamps, None).pump,
                                  args=(proc.stdout,), daemon=True),
                 threading.Thread(target=_Lines(stderr or (lambda: sys.stderr), timestamps, tail).pump,
                                  args=(proc.stderr,), daemon=True)]
        for t in pumps:
            t.start()
        code = proc.wait()
        for t in pumps:
            t.join(10)
        proc = None
        results = []
        for key in server.keys(_agent.RESULT_SCOPE):
            results.append(pickle.loads(server.get(_agent.RESULT_SCOPE, key)))
        if code != 0:
            said = [ln for ln in tail if ln.startswith('hvdrun:')] or list(tail)[-10:]
            said = said[-6:] or ['no message']
            raise RunError('%s: the elastic job failed (hvdrun exit status %d): %s%s'
                           % (who, code, said[-1], ''.join('\n  ' + ln for ln in said[:-1])), exit_code=code)
        results.sort(key=lambda r: r['rank'])
        return [r['value'] for r in results]
    finally:
        stop.set()
        if proc is not None and proc.poll() is None:
            import signal
            proc.send_signal(signal.SIGTERM)  # hvdrun stops its workers
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server.close()  # the agents see it and stop
        import shutil
        shutil.rmtree(work, ignore_errors=True)
