"""A stand-in for hvdrun's elastic driver in tests: writes the keys of
docs/elastic.md (elastic/assign.<N>, elastic/epoch, elastic/hosts_updated)
into the job's rendezvous store, signed with the job's secret as hvd's
store client signs (sdk/rendezvous/auth.go)."""
import hashlib
import hmac
import json
import os
import time
import urllib.parse
import urllib.request


class Driver:
    def __init__(self):
        self.addr = '%s:%s' % (os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR'], os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT'])
        self.secret = bytes.fromhex(os.environ.get('HVD_SECRET_KEY', ''))
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def put(self, key, value):
        uri = '/elastic/' + urllib.parse.quote(key, safe='')
        headers = {}
        if self.secret:
            ts = str(time.time_ns())
            msg = '\n'.join(['PUT', uri, ts, hashlib.sha256(value).hexdigest()]).encode()
            headers = {'X-Hvd-Timestamp': ts, 'X-Hvd-Auth': hmac.new(self.secret, msg, hashlib.sha256).hexdigest()}
        req = urllib.request.Request('http://' + self.addr + uri, data=value, method='PUT', headers=headers)
        self.opener.open(req, timeout=10).read()

    def publish(self, epoch, workers, removed=()):
        """The world of epoch: workers in rank order, all on one host."""
        n = len(workers)
        a = {'epoch': epoch, 'size': n, 'removed': list(removed), 'workers': {
            w: {'rank': r, 'size': n, 'local_rank': r, 'local_size': n, 'cross_rank': 0, 'cross_size': 1,
                'hostname': 'localhost'} for r, w in enumerate(workers)}}
        self.put('assign.%d' % epoch, json.dumps(a).encode())
        self.put('epoch', str(epoch).encode())

    def hosts_updated(self, flags):
        self.put('hosts_updated', ('%d,%d' % (time.time_ns(), flags)).encode())
