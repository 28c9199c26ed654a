"""The driver-side rendezvous store of hvd.spark and hvd.ray
(hvd/spark/store.py), without Spark or Ray: its HTTP protocol and
authentication, and hvd workers (the Go client in libhvd) rendezvousing
through it. Run by e2e/engines_test.go (TestDriverStore):

    HVD_TEST_NO_INIT=1 PYTHONPATH=<hvd package>:python/tests \\
        /usr/bin/python3 -m pytest python/tests/test_spark_store.py
"""
import http.client
import os
import subprocess
import sys
import threading
import time

import pytest

from hvd.spark import store


@pytest.fixture
def server():
    chunks = []
    s = store.RendezvousServer(host='127.0.0.1', on_output=lambda r, st, d: chunks.append((r, st, d)))
    s.chunks = chunks
    yield s
    s.close()


def _request(s, method, path, body=b'', secret=None, headers=None):
    h = dict(headers or {})
    secret = s.secret if secret is None else secret
    if secret:
        ts = str(time.time_ns())
        h[store.HEADER_TIMESTAMP] = ts
        h[store.HEADER_AUTH] = store.sign(secret, method, path, ts, body)
    c = http.client.HTTPConnection('127.0.0.1', s.port, timeout=10)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read(), r.headers
    finally:
        c.close()


def test_put_get_delete(server):
    assert _request(server, 'PUT', '/global/rank%2F0', b'addr')[0] == 200
    status, body, headers = _request(server, 'GET', '/global/rank%2F0')
    assert (status, body, headers[store.HEADER_STORE]) == (200, b'addr', '1')
    assert server.get('global', 'rank/0') == b'addr'
    assert _request(server, 'GET', '/global/missing')[0] == 404
    assert _request(server, 'DELETE', '/global/rank%2F0')[0] == 200
    assert _request(server, 'GET', '/global/rank%2F0')[0] == 404


def test_long_poll_returns_when_the_key_is_set(server):
    threading.Timer(0.3, lambda: server.put('s', 'k', b'v')).start()
    t0 = time.time()
    status, body, _ = _request(server, 'GET', '/s/k?wait_ms=5000')
    assert (status, body) == (200, b'v') and 0.2 < time.time() - t0 < 3
    t0 = time.time()
    assert _request(server, 'GET', '/s/absent?wait_ms=200')[0] == 404
    assert time.time() - t0 >= 0.19


def _split_range(body, n):
    out = []
    for _ in range(n):
        length, shift = 0, 0
        while True:
            b, body = body[0], body[1:]
            length |= (b & 0x7f) << shift
            shift += 7
            if b < 0x80:
                break
        out.append(body[:length])
        body = body[length:]
    assert body == b''
    return out


def test_range_read(server):
    # hvd's Go client reads every rank's host key or address in one request
    # from a store that answers X-Hvd-Store (sdk/rendezvous/batch.go)
    for i in range(3):
        server.put('e0', 'topology/%d' % i, b'host%d' % i * (i + 1))
    status, body, _ = _request(server, 'GET', '/e0/topology%2F?range=0-3')
    assert status == 200 and _split_range(body, 3) == [b'host0', b'host1host1', b'host2host2host2']
    status, body, headers = _request(server, 'GET', '/e0/topology%2F?range=1-5&wait_ms=100')
    assert status == 404 and headers[store.HEADER_MISSING] == 'topology%2F3'
    threading.Timer(0.3, lambda: server.put('e0', 'topology/3', b'x' * 200)).start()
    status, body, _ = _request(server, 'GET', '/e0/topology%2F?range=2-4&wait_ms=5000')
    assert status == 200 and _split_range(body, 2) == [b'host2host2host2', b'x' * 200]
    for bad in ('3-3', '4-2', 'a-b', '0-%d' % (store.MAX_RANGE + 1), '-1-2'):
        assert _request(server, 'GET', '/e0/topology%2F?range=' + bad)[0] == 400, bad
    assert _request(server, 'PUT', '/e0/k?range=0-1', b'v')[0] == 400
    assert _request(server, 'GET', '/e0/k?other=1')[0] == 400


def test_authentication(server):
    assert _request(server, 'PUT', '/s/k', b'v', secret=b'wrong')[0] == 401
    status, body, _ = _request(server, 'GET', '/s/k', secret=b'')
    assert status == 401 and b'HVD_SECRET_KEY' in body
    # a valid signature for another path does not pass
    ts = str(time.time_ns())
    h = {store.HEADER_TIMESTAMP: ts, store.HEADER_AUTH: store.sign(server.secret, 'PUT', '/s/other', ts, b'v')}
    assert _request(server, 'PUT', '/s/k', b'v', secret=b'', headers=h)[0] == 401
    # an old timestamp does not pass
    old = str(time.time_ns() - 3600 * 10**9)
    h = {store.HEADER_TIMESTAMP: old, store.HEADER_AUTH: store.sign(server.secret, 'PUT', '/s/k', old, b'v')}
    assert _request(server, 'PUT', '/s/k', b'v', secret=b'', headers=h)[0] == 401
    assert server.get('s', 'k') is None


def test_bad_requests(server):
    assert _request(server, 'GET', '/onlyscope')[0] == 400
    assert _request(server, 'GET', '/a/b/c')[0] == 400
    assert _request(server, 'PUT', '/a/b?wait_ms=1', b'x')[0] == 400
    assert _request(server, 'GET', '/a/b?wait_ms=x')[0] == 400


def test_output_scope_goes_to_the_callback(server):
    c = store.StoreClient('127.0.0.1', server.port, server.secret_hex)
    c.put(store.OUTPUT_SCOPE, '3.stdout', b'hello\n')
    c.close()
    assert server.chunks == [(3, 'stdout', b'hello\n')]
    assert server.keys(store.OUTPUT_SCOPE) == []


WORKER = r'''
import os, sys, torch
import hvd.torch as hvd
hvd.init()
x = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
print('rank %d of %d sum %g' % (hvd.rank(), hvd.size(), x.item()))
'''


@pytest.mark.parametrize('np_', [2, 3])
def test_hvd_workers_rendezvous_through_it(server, np_):
    procs = []
    for r in range(np_):
        env = dict(os.environ, HOROVOD_RANK=str(r), HOROVOD_SIZE=str(np_), HOROVOD_GLOO_RENDEZVOUS_ADDR='127.0.0.1',
                   HOROVOD_GLOO_RENDEZVOUS_PORT=str(server.port), HVD_SECRET_KEY=server.secret_hex,
                   HOROVOD_GLOO_TIMEOUT_SECONDS='20')
        procs.append(subprocess.Popen([sys.executable, '-c', WORKER], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=60)[0].decode() for p in procs]
    want = sum(range(1, np_ + 1))
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and 'rank %d of %d sum %d' % (r, np_, want) in out, out


def test_worker_with_the_wrong_key_is_refused(server):
    env = dict(os.environ, HOROVOD_RANK='0', HOROVOD_SIZE='2', HOROVOD_GLOO_RENDEZVOUS_ADDR='127.0.0.1',
               HOROVOD_GLOO_RENDEZVOUS_PORT=str(server.port), HVD_SECRET_KEY='00' * 32, HOROVOD_GLOO_TIMEOUT_SECONDS='10')
    p = subprocess.run([sys.executable, '-c', WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=60)
    out = p.stdout.decode()
    assert p.returncode != 0 and 'HVD_SECRET_KEY' in out, out
