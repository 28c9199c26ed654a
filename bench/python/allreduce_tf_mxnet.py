"""Times the Python-level allreduce (Sum, float32, out of place: the result
is a new tensor, as TensorFlow's must be) through hvd.torch, hvd.tensorflow
or hvd.mxnet (argv[1]), at the sizes of argv[2] (bytes), and checks the
result in the same run. Run under hvdrun by run_tf_mxnet.sh, one framework
per run, in the framework's own interpreter; prints
`framework size_bytes time_us` on rank 0."""
import sys
import time

import numpy as np

fw = sys.argv[1]
sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else '4096,67108864').split(',')]

if fw == 'torch':
    import torch
    import hvd.torch as hvd
    torch.set_num_threads(1)

    def make(n, v):
        return torch.full((n,), v, dtype=torch.float32)

    def reduce(t, name):
        return hvd.allreduce(t, op=hvd.Sum, name=name)

    def first(t):
        return float(t[0])
elif fw == 'tensorflow':
    import tensorflow as tf
    import hvd.tensorflow as hvd
    # One thread each, as torch.set_num_threads(1) above: on a small machine
    # the framework's idle pools otherwise compete with the engine's threads.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    def make(n, v):
        return tf.fill([n], np.float32(v))

    def reduce(t, name):
        return hvd.allreduce(t, op=hvd.Sum, name=name)

    def first(t):
        return float(t[0])
elif fw in ('mxnet', 'mxnet_'):
    import mxnet as mx  # run_tf_mxnet.sh sets MXNET_CPU_WORKER_NTHREADS=1 and OMP_NUM_THREADS=1
    import hvd.mxnet as hvd

    def make(n, v):
        return mx.nd.full((n,), v, dtype='float32')

    if fw == 'mxnet':
        def reduce(t, name):
            return hvd.allreduce(t, average=False, name=name)
    else:  # in place, as Horovod's DistributedTrainer reduces gradients
        def reduce(t, name):
            return hvd.allreduce_(t, average=False, name=name)

    def first(t):
        return float(t[0].asscalar())
else:
    raise SystemExit('framework must be torch, tensorflow, mxnet or mxnet_')

hvd.init()
n = hvd.size()
if hvd.rank() == 0:
    print('# framework size_bytes time_us np=%d' % n, flush=True)
for size in sizes:
    t = make(size // 4, 1.0)
    iters = max(10, min(2000, (256 << 20) // max(size, 1) // 4))
    name = 'bench.%d' % size
    for _ in range(3):
        out = reduce(t, name)
    if fw != 'mxnet_':
        assert first(out) == n, (fw, first(out))
    start = time.perf_counter()
    for _ in range(iters):
        out = reduce(t, name)
    el = time.perf_counter() - start
    if hvd.rank() == 0:
        print('%s %d %.1f' % (fw, size, el / iters * 1e6), flush=True)
hvd.shutdown()
