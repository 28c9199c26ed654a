"""``python -m hvd._driver.elastic_worker``: the worker process of
hvd.spark.run_elastic and hvd.ray.ElasticRayExecutor, started by hvdrun's
elastic driver through an agent (hvd._driver.agent). It reads the pickled
``(fn, args, kwargs)`` from the run's driver store (``$HVD_AGENT_STORE``,
scope ``payload``), calls it, and puts
``{'rank': final rank, 'value': return value}`` into the run's driver store
(``$HVD_AGENT_STORE``, scope ``results``, key: the worker id); a function
that raises prints the traceback and exits 1 (hvdrun then treats the host as
failed), a worker the driver removed exits 0 without a result."""
import os
import pickle
import sys
import traceback


def _dumps(obj):
    try:
        import cloudpickle
    except ImportError:
        from pyspark import cloudpickle
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _get(addr, port, secret_hex, scope, key):
    """GET scope/key from the driver's store (signed as hvd._driver.store
    wants)."""
    import http.client
    import time
    import urllib.parse

    from hvd._driver import store as _store
    uri = '/%s/%s' % (urllib.parse.quote(scope, safe=''), urllib.parse.quote(key, safe=''))
    headers = {}
    if secret_hex:
        ts = str(time.time_ns())
        headers = {_store.HEADER_TIMESTAMP: ts, _store.HEADER_AUTH: _store.sign(bytes.fromhex(secret_hex), 'GET', uri, ts, b'')}
    conn = http.client.HTTPConnection(addr, port, timeout=60)
    try:
        conn.request('GET', uri, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError('hvd: the driver\'s store at %s:%d answered %d to GET %s: %s'
                           % (addr, port, resp.status, uri, body.decode(errors='replace')))
    return body


def main():
    from hvd._driver import agent as _agent
    from hvd._driver import store as _store
    addr, _, port = os.environ['HVD_AGENT_STORE'].rpartition(':')
    fn, args, kwargs = pickle.loads(_get(addr, int(port), os.environ['HVD_AGENT_SECRET'],
                                         _agent.PAYLOAD_SCOPE, _agent.PAYLOAD_KEY))
    try:
        value = fn(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException:  # noqa: B902 - hvdrun reports the exit status
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    rank = None
    try:
        from hvd.common import loader, state
        if loader.loaded() is not None:
            rank = state.rank()
    except Exception:  # noqa: B902 - hvd not initialised: rank from the launch
        rank = None
    if rank is None:
        rank = int(os.environ.get('HOROVOD_RANK', '0'))
    client = _store.StoreClient(addr, int(port), os.environ['HVD_AGENT_SECRET'], timeout=30)
    key = '%s.%d' % (os.environ.get('HVD_ELASTIC_WORKER_ID', os.environ.get('HVD_AGENT_NAME', '?')), os.getpid())
    client.put(_agent.RESULT_SCOPE, key, _dumps({'rank': rank, 'value': value}))
    client.close()
    try:
        from hvd.common import basics, loader
        if loader.loaded() is not None:
            basics.shutdown()
    except Exception:  # noqa: B902
        pass
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == '__main__':
    main()
