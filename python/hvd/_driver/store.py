"""The rendezvous store a driver serves for workers it does not start itself
(hvd.spark, hvd.ray): Horovod's HTTP key-value protocol as hvd's Go store
speaks it (sdk/rendezvous: PUT/GET/DELETE /<scope>/<key>, 404 for an
absent key, GET ?wait_ms=N long-polls, GET /<scope>/<prefix>?range=LO-HI
answers the values of <prefix>LO … <prefix>HI-1 in one request, each
preceded by its length as a uvarint, or 404 naming the first missing key in
X-Hvd-Missing; X-Hvd-Store on every answer), with
every request authenticated by the job's secret key (X-Hvd-Timestamp and
X-Hvd-Auth = HMAC-SHA256(secret, method + "\\n" + request URI + "\\n" +
timestamp + "\\n" + hex(SHA-256(body)))), so that only the job's workers
(given HVD_SECRET_KEY) can read or write it.

Besides the keys the workers' rendezvous writes, the driver uses two scopes
of its own: ``_hvd_out`` (PUT /_hvd_out/<rank>.<stream>: a chunk of a
worker's stdout or stderr, handed at once to the server's ``on_output``
callback instead of being stored) and ``_hvd_task`` (a worker's
registration, read back by the driver with :meth:`RendezvousServer.get`).
"""
import hashlib
import hmac
import http.client
import http.server
import secrets
import socket
import threading
import time
import urllib.parse

HEADER_AUTH = 'X-Hvd-Auth'
HEADER_TIMESTAMP = 'X-Hvd-Timestamp'
HEADER_STORE = 'X-Hvd-Store'
HEADER_MISSING = 'X-Hvd-Missing'
MAX_RANGE = 1 << 16  # keys one range request may name, as the Go store
MAX_CLOCK_SKEW = 300.0  # seconds, as the Go store
MAX_VALUE_SIZE = 64 << 20
MAX_WAIT = 30.0
OUTPUT_SCOPE = '_hvd_out'
TASK_SCOPE = '_hvd_task'


def sign(secret, method, uri, timestamp, body):
    msg = '\n'.join([method, uri, timestamp, hashlib.sha256(body or b'').hexdigest()]).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def _parse_range(v):
    """(lo, hi) from 'LO-HI' with 0 <= LO < HI and HI-LO <= MAX_RANGE, else None."""
    a, sep, b = v.partition('-')
    if not sep or not a.isdigit() or not b.isdigit():
        return None
    lo, hi = int(a), int(b)
    return (lo, hi) if lo < hi and hi - lo <= MAX_RANGE else None


def _uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7f) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'hvd-driver-store'

    def log_message(self, fmt, *args):  # quiet: the driver reports what matters
        pass

    def _answer(self, code, body=b'', headers=()):
        self.send_response(code)
        self.send_header(HEADER_STORE, '1')
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Type', 'application/octet-stream' if code == 200 else 'text/plain; charset=utf-8')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _fail(self, code, msg, headers=()):
        self._answer(code, ('hvd: rendezvous: ' + msg).encode(), headers)

    def _handle(self, method):
        store = self.server.store
        try:
            length = int(self.headers.get('Content-Length') or 0)
        except ValueError:
            return self._fail(400, 'bad Content-Length')
        if length < 0 or length > MAX_VALUE_SIZE:
            return self._fail(413, 'body over %d bytes' % MAX_VALUE_SIZE)
        body = self.rfile.read(length) if length else b''
        if store.secret is not None:
            ts = self.headers.get(HEADER_TIMESTAMP, '')
            auth = self.headers.get(HEADER_AUTH, '')
            if not auth:
                return self._fail(401, 'no %s header; this store requires the job\'s secret key (HVD_SECRET_KEY)' % HEADER_AUTH)
            try:
                skew = abs(time.time() - int(ts) / 1e9)
            except ValueError:
                return self._fail(401, '%s %r is not a unix time in nanoseconds' % (HEADER_TIMESTAMP, ts))
            if skew > MAX_CLOCK_SKEW:
                return self._fail(401, '%s is %.0f s away from the store\'s clock' % (HEADER_TIMESTAMP, skew))
            if not hmac.compare_digest(auth, sign(store.secret, method, self.path, ts, body)):
                return self._fail(401, '%s signature does not match: the client uses a different secret key (HVD_SECRET_KEY) than the store' % HEADER_AUTH)
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.split('/')
        if len(parts) != 3 or parts[0] != '' or not parts[1] or not parts[2]:
            return self._fail(400, 'path %r is not /<scope>/<key>' % url.path)
        scope, key = urllib.parse.unquote(parts[1]), urllib.parse.unquote(parts[2])
        wait, rng = 0.0, None
        if url.query:
            q = urllib.parse.parse_qs(url.query)
            if method != 'GET' or not q or set(q) - {'wait_ms', 'range'} or any(len(v) != 1 for v in q.values()):
                return self._fail(400, 'query %r: only GET ?wait_ms=N and ?range=LO-HI' % url.query)
            if 'wait_ms' in q:
                try:
                    wait = min(max(int(q['wait_ms'][0]), 0) / 1000.0, MAX_WAIT)
                except ValueError:
                    return self._fail(400, 'wait_ms=%r is not an integer' % q['wait_ms'][0])
            if 'range' in q:
                rng = _parse_range(q['range'][0])
                if rng is None:
                    return self._fail(400, 'range=%r: want LO-HI with 0 <= LO < HI and at most %d keys' % (q['range'][0], MAX_RANGE))
        if method == 'PUT':
            store.put(scope, key, body)
            return self._answer(200)
        if method == 'DELETE':
            store._delete(scope, key)
            return self._answer(200)
        if rng is not None:
            values, missing = store.get_range(scope, key, rng[0], rng[1], wait)
            if values is None:
                return self._fail(404, 'no key %r in scope %r' % (missing, scope),
                                  [(HEADER_MISSING, urllib.parse.quote(missing, safe=''))])
            return self._answer(200, b''.join(_uvarint(len(v)) + v for v in values))
        value = store.get(scope, key, wait)
        if value is None:
            return self._fail(404, 'no key %r in scope %r' % (key, scope))
        return self._answer(200, value)

    def do_PUT(self):
        self._handle('PUT')

    def do_GET(self):
        self._handle('GET')

    def do_DELETE(self):
        self._handle('DELETE')


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class RendezvousServer:
    """The store, served from background threads until :meth:`close`.
    ``secret``: bytes (None: a random 32-byte key is made; pass b'' for
    none). ``on_output(rank, stream, data)`` receives workers' output
    chunks (``stream`` is 'stdout' or 'stderr'). Thread-safe."""

    def __init__(self, host='0.0.0.0', port=0, secret=None, on_output=None):
        self.secret = secrets.token_bytes(32) if secret is None else (secret or None)
        self.on_output = on_output
        self._data = {}
        self._cond = threading.Condition()
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.store = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name='hvd-driver-store', daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._httpd.server_address[1]

    @property
    def secret_hex(self):
        return self.secret.hex() if self.secret else ''

    def put(self, scope, key, value):
        """Sets key in scope (the driver's own writes; workers PUT over HTTP)."""
        if scope == OUTPUT_SCOPE and self.on_output is not None:
            rank, _, stream = key.partition('.')
            try:
                self.on_output(int(rank), stream, value)
            except Exception:  # noqa: B902 - a bad sink must not break the store
                pass
            return
        with self._cond:
            self._data[(scope, key)] = value
            self._cond.notify_all()

    def _delete(self, scope, key):
        with self._cond:
            self._data.pop((scope, key), None)

    def get(self, scope, key, wait=0.0):
        """The value of key in scope, waiting up to ``wait`` seconds for it;
        None when absent."""
        end = time.monotonic() + wait
        with self._cond:
            while (scope, key) not in self._data:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._data[(scope, key)]

    def get_range(self, scope, prefix, lo, hi, wait=0.0):
        """The values of prefix+str(lo) … prefix+str(hi-1) in scope, waiting
        up to ``wait`` seconds for all of them: (values, None), or (None, the
        first key still missing)."""
        keys = [prefix + str(i) for i in range(lo, hi)]
        end = time.monotonic() + wait
        with self._cond:
            while True:
                missing = next((k for k in keys if (scope, k) not in self._data), None)
                if missing is None:
                    return [self._data[(scope, k)] for k in keys], None
                left = end - time.monotonic()
                if left <= 0:
                    return None, missing
                self._cond.wait(left)

    def keys(self, scope):
        with self._cond:
            return sorted(k for s, k in self._data if s == scope)

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


class StoreClient:
    """A worker's minimal client for the driver's own scopes (output,
    registration). Not thread-safe: one per thread."""

    def __init__(self, addr, port, secret_hex, timeout=30.0):
        self.addr, self.port, self.timeout = addr, int(port), timeout
        self.secret = bytes.fromhex(secret_hex) if secret_hex else None
        self._conn = None

    def put(self, scope, key, value):
        uri = '/%s/%s' % (urllib.parse.quote(scope, safe=''), urllib.parse.quote(key, safe=''))
        headers = {'Content-Length': str(len(value))}
        if self.secret:
            ts = str(time.time_ns())
            headers[HEADER_TIMESTAMP] = ts
            headers[HEADER_AUTH] = sign(self.secret, 'PUT', uri, ts, value)
        for attempt in range(3):
            try:
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(self.addr, self.port, timeout=self.timeout)
                self._conn.request('PUT', uri, body=value, headers=headers)
                resp = self._conn.getresponse()
                text = resp.read()
                if resp.status != 200:
                    raise RuntimeError('hvd: the driver\'s store at %s:%d answered %d to PUT %s: %s'
                                       % (self.addr, self.port, resp.status, uri, text.decode(errors='replace')))
                return
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
                time.sleep(0.1 * (attempt + 1))

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def interface_ipv4(name):
    """The IPv4 address of network interface ``name`` (Linux)."""
    import fcntl
    import struct
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', name.encode()[:15]))  # SIOCGIFADDR
    except OSError as e:
        raise ValueError('network interface %r has no IPv4 address: %s' % (name, e)) from None
    finally:
        s.close()
    return socket.inet_ntoa(packed[20:24])

