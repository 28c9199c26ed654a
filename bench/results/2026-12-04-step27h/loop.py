import time, torch, os
import hvd.torch as hvd
torch.set_num_threads(1)
hvd.init()
tensors = [torch.zeros(1024) for _ in range(200)]
names = ['grad.%d' % i for i in range(200)]
t0 = time.perf_counter()
for it in range(int(os.environ.get('ITERS', '1500'))):
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
    for h in hs:
        hvd.synchronize(h)
if hvd.rank() == 0: print('per batch %.0f us' % ((time.perf_counter()-t0)/int(os.environ.get('ITERS', '1500'))*1e6))
hvd.shutdown()
