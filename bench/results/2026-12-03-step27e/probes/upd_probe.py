import copy, statistics, time, torch, torch.nn.functional as F
import hvd.torch as hvd
from steps import mlp, mlp_batches
torch.set_num_threads(1)
hvd.init()
torch.manual_seed(0)
base = mlp(64); data = mlp_batches(hvd.rank(), 64)
m = copy.deepcopy(base)
opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01), named_parameters=m.named_parameters())
m2 = copy.deepcopy(base); opt2 = torch.optim.SGD(m2.parameters(), lr=0.01)
F.cross_entropy(m2(data[0][0]), data[0][1]).backward()
res = {'hvd_step_again': [], 'local_again': []}
for i in range(1500):
    x, y = data[i % len(data)]
    opt.zero_grad(); F.cross_entropy(m(x), y).backward()
    opt.synchronize()
    order = ('local_after_sync', 'hvd_step') if i % 2 else ('hvd_step', 'local_after_sync')
    for k in order:
        t = time.perf_counter(); c = time.thread_time()
        if k == 'hvd_step':
            with opt.skip_synchronize(): opt.step()
        else:
            opt2.step()
        res.setdefault(k + ('_1st' if k == order[0] else '_2nd'), []).append(time.perf_counter() - t)
        res.setdefault(k + ('_1st' if k == order[0] else '_2nd') + '_cpu', []).append(time.thread_time() - c)
    t = time.perf_counter(); opt2.step(); res['local_again'].append(time.perf_counter() - t)
    t = time.perf_counter()
    with opt.skip_synchronize(): opt.step()
    res['hvd_step_again'].append(time.perf_counter() - t)
if hvd.rank() == 0:
    for k, v in res.items():
        v = v[100:]
        print('%-18s median %.1f us' % (k, statistics.median(v) * 1e6))
hvd.shutdown()
