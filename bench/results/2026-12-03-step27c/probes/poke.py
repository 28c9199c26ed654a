import copy, statistics, time, sys, os, resource
sys.path.insert(0, '/work/main/bench/python')
import torch, torch.nn.functional as F
import hvd.torch as hvd
from hvd.common import _abi
from steps import mlp, mlp_batches
torch.set_num_threads(1)
hvd.init()
rank = hvd.rank()
torch.manual_seed(0)
H = int(os.environ.get('H', '1024'))
base = mlp(H); data = mlp_batches(rank, 64)
m = copy.deepcopy(base); o = torch.optim.SGD(m.parameters(), lr=0.01)
def one(b, poke):
    x, y = b
    o.zero_grad(); F.cross_entropy(m(x), y).backward(); o.step()
    if poke: _abi.rank()
res = {0: [], 1: []}
cs = {0: [], 1: []}
N = int(os.environ.get('N', '30'))
for r in range(int(os.environ.get('R', '6'))):
    for poke in (0, 1):
        for i in range(3): one(data[i % 16], poke)
        hvd.barrier()
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        ts = []
        for i in range(N):
            t = time.perf_counter(); one(data[i % 16], poke); ts.append(time.perf_counter() - t)
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        res[poke].append(statistics.median(ts))
        cs[poke].append((u1.ru_nvcsw + u1.ru_nivcsw - u0.ru_nvcsw - u0.ru_nivcsw) / N)
if rank == 0:
    for poke in (0, 1):
        print('poke=%d step ms %s  csw/step %s' % (poke, ' '.join('%.2f' % (x * 1e3) for x in res[poke]), ' '.join('%.0f' % x for x in cs[poke])))
    print('ratio poke/local per round', ' '.join('%.3f' % (b / a) for a, b in zip(res[0], res[1])))
hvd.shutdown()
