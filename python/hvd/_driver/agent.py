"""Agents: the remote-exec side of hvd.spark.run_elastic and
hvd.ray.ElasticRayExecutor.

The elastic forms reuse hvdrun's elastic driver (``--host-discovery-script``,
``--min-np``/``--max-np``, blacklisting, resets: docs/elastic.md) as it is.
Every Spark task (or Ray actor) runs one :func:`serve` agent, a "host" of one
slot named ``<prefix>-<i>``. hvdrun reaches a remote host through the command
in ``HVD_SSH``; the driver points it at ``python -m hvd._driver.agent_ssh``,
which connects to the named agent over TCP (HMAC challenge with the run's
secret), hands it the remote script hvdrun would give ssh, forwards stdin and
relays the script's stdout, stderr and exit status, as ssh does. Stopping the
stand-in (hvdrun stops a worker by stopping its ssh) closes the connection,
and the agent kills the script's process group; a lost agent (task, actor,
executor or node gone) closes it too, and the stand-in exits 255 like ssh
does when its host is gone, so hvdrun fails and blacklists that host.

Agents register with the driver's store (scope ``agents``: name -> address)
and put a heartbeat every second; the driver lists the agents whose heartbeat
is fresh in the file its discovery script prints. When the store goes away
(the run ended) an agent stops its workers and returns.

Frames on the agent connection: 1 type byte, 4 length bytes (big endian),
payload. Stand-in -> agent: ``S`` (JSON: script), ``i`` (stdin data), ``c``
(stdin closed). Agent -> stand-in: ``o``/``e`` (stdout/stderr data), ``x``
(exit status, decimal).
"""
import hashlib
import hmac
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from hvd._driver import store as _store

AGENT_SCOPE = 'agents'
RESULT_SCOPE = 'results'
PAYLOAD_SCOPE = 'payload'
PAYLOAD_KEY = 'fn'
HEARTBEAT_S = 1.0
NONCE_LEN = 32


def send_frame(sock, lock, kind, data):
    with lock:
        sock.sendall(kind + struct.pack('>I', len(data)) + data)


def recv_exact(sock, n):
    buf = b''
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(sock):
    """(kind, data), or (None, None) at end of stream."""
    head = recv_exact(sock, 5)
    if head is None:
        return None, None
    n = struct.unpack('>I', head[1:])[0]
    data = recv_exact(sock, n) if n else b''
    if data is None:
        return None, None
    return head[:1], data


def proof(secret, nonce):
    return hmac.new(secret, b'hvd-agent:' + nonce, hashlib.sha256).digest()


def _route_source(addr, port):
    """The address of this host that addr:port is reached from (the one the
    driver can dial back)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((addr, port))
        return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        s.close()


def _kill_group(proc, grace=5.0):
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


def _die_with_parent():
    """In the child: SIGKILL when the agent dies (an agent killed by its
    engine leaves no worker behind). Linux's PR_SET_PDEATHSIG."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: B902 - not Linux: the connection close still stops it
        pass


class _Agent:
    def __init__(self, job, name):
        self.job, self.name = job, name
        self.secret = bytes.fromhex(job['secret'])
        self.procs = set()
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.env = dict(os.environ)
        for k, v in (job.get('env') or {}).items():
            if v is None:
                self.env.pop(k, None)
            else:
                self.env[k] = str(v)
        self.env.update({'HVD_AGENT_PYTHON': sys.executable,
                         'HVD_AGENT_STORE': '%s:%d' % (job['addr'], job['port']),
                         'HVD_AGENT_SECRET': job['secret'], 'HVD_AGENT_NAME': name})
        pp = job.get('pythonpath')
        if pp:
            self.env['PYTHONPATH'] = pp + (os.pathsep + self.env['PYTHONPATH'] if self.env.get('PYTHONPATH') else '')
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(('0.0.0.0', 0))
        self.sock.listen(16)
        self.sock.settimeout(0.5)

    def handle(self, conn):
        conn.settimeout(10)
        script = None
        try:
            nonce = os.urandom(NONCE_LEN)
            conn.sendall(nonce)
            got = recv_exact(conn, 32)
            if got is not None and hmac.compare_digest(got, proof(self.secret, nonce)):
                kind, data = recv_frame(conn)
                if kind == b'S':
                    script = json.loads(data.decode())['script']
                    conn.settimeout(None)
        except (OSError, ValueError, KeyError):
            script = None
        if script is None:  # not the driver's stand-in: nothing runs
            conn.close()
            return
        lock = threading.Lock()
        proc = subprocess.Popen(['/bin/sh', '-c', script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env, start_new_session=True,
                                preexec_fn=_die_with_parent)
        with self.lock:
            self.procs.add(proc)

        def pump(stream, kind):
            for chunk in iter(lambda: stream.read1(65536), b''):
                try:
                    send_frame(conn, lock, kind, chunk)
                except OSError:
                    pass
            stream.close()

        pumps = [threading.Thread(target=pump, args=(proc.stdout, b'o'), daemon=True),
                 threading.Thread(target=pump, args=(proc.stderr, b'e'), daemon=True)]
        for t in pumps:
            t.start()

        def stdin_and_hangup():
            while True:
                try:
                    kind, data = recv_frame(conn)
                except OSError:
                    kind = None
                if kind is None:  # the stand-in is gone: stop the script like sshd does
                    _kill_group(proc)
                    return
                try:
                    if kind == b'i':
                        proc.stdin.write(data)
                        proc.stdin.flush()
                    elif kind == b'c':
                        proc.stdin.close()
                except (OSError, ValueError):
                    pass

        threading.Thread(target=stdin_and_hangup, daemon=True).start()
        code = proc.wait()
        for t in pumps:
            t.join(10)
        with self.lock:
            self.procs.discard(proc)
        if code < 0:
            code = 128 - code
        try:
            send_frame(conn, lock, b'x', str(code).encode())
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(5)
            while conn.recv(4096):  # until the stand-in closes
                pass
        except OSError:
            pass
        conn.close()

    def accept_loop(self):
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def close(self):
        self.closed.set()
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            _kill_group(p)


def serve(job, name):
    """Runs the agent ``name`` until the driver's store goes away (the run
    ended) or stops answering.
    job: addr, port, secret (hex), env, pythonpath."""
    a = _Agent(job, name)
    t = threading.Thread(target=a.accept_loop, daemon=True)
    t.start()
    me = _route_source(job['addr'], job['port'])
    failures = 0
    try:
        while True:
            info = {'addr': me, 'port': a.sock.getsockname()[1], 'pid': os.getpid(),
                    'host': socket.gethostname(), 'time': time.time()}
            # a new connection every time: a closed store refuses it at once
            # (a kept-alive one would still be served by its handler thread)
            client = _store.StoreClient(job['addr'], job['port'], job['secret'], timeout=10)
            try:
                client.put(AGENT_SCOPE, name, json.dumps(info).encode())
                failures = 0
            except Exception:  # noqa: B902 - the store closed: the run is over
                failures += 1
                if failures >= 2:
                    return
            finally:
                client.close()
            time.sleep(HEARTBEAT_S)
    finally:
        a.close()
