import time, torch, os, sys
import hvd.torch as hvd
torch.set_num_threads(1)
hvd.init()
tensors = [torch.zeros(1024) for _ in range(200)]
names = ['grad.%d' % i for i in range(200)]
N = int(sys.argv[1])
def batch():
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
    for h in hs:
        hvd.synchronize(h)
for _ in range(50): batch()
hvd.barrier()
t0 = time.perf_counter()
for _ in range(N): batch()
dt = time.perf_counter() - t0
if hvd.rank() == 0: print('us/batch %.1f' % (dt / N * 1e6), flush=True)
hvd.shutdown()
