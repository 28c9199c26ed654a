import time, statistics, torch
import hvd.torch as hvd
from hvd.torch import tensors as T
hvd.init()
small = torch.zeros(2)
def t(label, f, n=400):
    for _ in range(50): f()
    hvd.barrier()
    xs=[]
    for _ in range(n):
        t0=time.perf_counter(); f(); xs.append(time.perf_counter()-t0)
    if hvd.rank()==0: print('%-40s %8.1f us' % (label, statistics.median(xs)*1e6), flush=True)
plain = T._PLAIN
for r in range(3):
    T._PLAIN = plain
    t('allreduce (new tensor), C path', lambda: hvd.allreduce(small, op=hvd.Sum, name='a'))
    T._PLAIN = ()
    t('allreduce (new tensor), general path', lambda: hvd.allreduce(small, op=hvd.Sum, name='a'))
    t('allreduce_', lambda: hvd.allreduce_(small, op=hvd.Sum, name='b'))
hvd.shutdown()
