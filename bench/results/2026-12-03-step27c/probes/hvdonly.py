import copy, time, sys, os
sys.path.insert(0, '/work/main/bench/python')
import torch, torch.nn.functional as F
import hvd.torch as hvd
from steps import mlp, mlp_batches
torch.set_num_threads(1)
hvd.init()
rank = hvd.rank()
torch.manual_seed(0)
m = mlp(int(os.environ.get('H', '1024'))); data = mlp_batches(rank, 64)
o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01), named_parameters=m.named_parameters())
def one(b):
    x, y = b
    o.zero_grad(); F.cross_entropy(m(x), y).backward(); o.step()
for i in range(5): one(data[i % 16])
hvd.barrier()
print('START', time.monotonic(), os.getpid(), flush=True)
t = time.perf_counter()
N = int(os.environ.get('N', '20'))
for i in range(N): one(data[i % 16])
print('END', time.monotonic(), (time.perf_counter() - t) / N * 1e3, 'ms/step', flush=True)
hvd.shutdown()
