import copy, statistics, time, torch, torch.nn.functional as F
import hvd.torch as hvd
from steps import mlp, mlp_batches
torch.set_num_threads(1)
hvd.init()
base = mlp(64); data = mlp_batches(hvd.rank(), 64)
m2 = copy.deepcopy(base); opt2 = torch.optim.SGD(m2.parameters(), lr=0.01)
F.cross_entropy(m2(data[0][0]), data[0][1]).backward()
small = torch.zeros(2)
def busy(d):
    t = time.perf_counter()
    while time.perf_counter() - t < d: pass
pre = {
  'none': lambda: None,
  'is_initialized': lambda: hvd.is_initialized(),
  'allreduce8B': lambda: hvd.allreduce_(small, op=hvd.Sum),
  'allreduce8B+busy200': lambda: (hvd.allreduce_(small, op=hvd.Sum), busy(0.0002)),
  'sleep200': lambda: time.sleep(0.0002),
  'busy200': lambda: busy(0.0002),
}
res = {k: [] for k in pre}
for i in range(600):
    for k, f in pre.items():
        opt2.step(); f()
        c = time.thread_time(); opt2.step(); res[k].append(time.thread_time() - c)
if hvd.rank() == 0:
    for k, v in res.items():
        print('size %d %-22s SGD step cpu median %.1f us' % (hvd.size(), k, statistics.median(v[50:]) * 1e6))
hvd.shutdown()
