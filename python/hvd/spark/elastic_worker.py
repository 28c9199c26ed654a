"""``python -m hvd.spark.elastic_worker``: the worker process of
hvd.spark.run_elastic and hvd.ray.ElasticRayExecutor, started by hvdrun's
elastic driver through an agent (hvd.spark.agent). It loads the pickled
``(fn, args, kwargs)`` at ``$HVD_AGENT_PAYLOAD``, calls it, and puts
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


def main():
    from hvd.spark import agent as _agent
    from hvd.spark import store as _store
    with open(os.environ['HVD_AGENT_PAYLOAD'], 'rb') as f:
        fn, args, kwargs = pickle.load(f)
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
    addr, _, port = os.environ['HVD_AGENT_STORE'].rpartition(':')
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
