"""``python -m hvd._driver.agent_ssh [ssh options] HOST SCRIPT``: the ssh
stand-in hvdrun runs (``HVD_SSH``) for the agents of hvd.spark.run_elastic
and hvd.ray.ElasticRayExecutor (see hvd._driver.agent). HOST is an agent's
name, looked up in the JSON table at ``$HVD_AGENT_TABLE``; the connection is
authenticated with ``$HVD_AGENT_SECRET``. Exit status: the script's, or 255
when the agent cannot be reached or is lost (as ssh)."""
import json
import os
import signal
import socket
import sys
import threading

from hvd._driver import agent as _agent


def _fail(msg):
    sys.stderr.write('hvd agent ssh: %s\n' % msg)
    sys.stderr.flush()
    os._exit(255)


def main(argv):
    args = list(argv)
    while args and args[0].startswith('-'):
        opt = args.pop(0)
        if opt in ('-o', '-p', '-i', '-l') and args:
            args.pop(0)
    if len(args) != 2:
        _fail('usage: agent_ssh [ssh options] HOST SCRIPT, got %r' % (argv,))
    host, script = args
    try:
        with open(os.environ['HVD_AGENT_TABLE']) as f:
            table = json.load(f)
        secret = bytes.fromhex(os.environ['HVD_AGENT_SECRET'])
    except (KeyError, OSError, ValueError) as e:
        _fail('no agent table: %s' % e)
    if host not in table:
        _fail('%s: no such agent (known: %s)' % (host, ', '.join(sorted(table)) or 'none'))
    addr, port = table[host]
    try:
        sock = socket.create_connection((addr, int(port)), timeout=10)
        nonce = _agent.recv_exact(sock, _agent.NONCE_LEN)
        if nonce is None:
            raise OSError('closed during the handshake')
        sock.sendall(_agent.proof(secret, nonce))
        lock = threading.Lock()
        _agent.send_frame(sock, lock, b'S', json.dumps({'script': script}).encode())
        sock.settimeout(None)
    except OSError as e:
        _fail('%s (%s:%s): %s' % (host, addr, port, e))

    def on_term(signum, frame):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def stdin_pump():
        fd = sys.stdin.fileno()
        try:
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                _agent.send_frame(sock, lock, b'i', data)
            _agent.send_frame(sock, lock, b'c', b'')
        except OSError:
            pass

    threading.Thread(target=stdin_pump, daemon=True).start()
    heard = False
    while True:
        try:
            kind, data = _agent.recv_frame(sock)
        except OSError:
            kind = None
        if kind is None:
            if not heard:
                _fail('%s: lost the connection to the agent (it refused the run\'s secret, or it is gone)' % host)
            _fail('%s: lost the connection to the agent' % host)
        heard = True
        if kind == b'o':
            os.write(1, data)
        elif kind == b'e':
            os.write(2, data)
        elif kind == b'x':
            sock.close()
            os._exit(int(data))


if __name__ == '__main__':
    main(sys.argv[1:])
