import os, csw, copy, statistics, time, resource, sys
sys.path.insert(0, '/work/main/bench/python')
import torch, torch.nn.functional as F
import hvd.torch as hvd
from steps import mlp, mlp_batches
torch.set_num_threads(1)
hvd.init()
import slack
import sysidle
if os.environ.get('SYSIDLE'):
    # some traffic first so that sysmon ticks
    print('sysmon idle', sysidle.idle_sysmon())
if os.environ.get('SLACK'): print('slack set on', slack.set_slack(int(os.environ['SLACK'])), 'threads')
rank = hvd.rank()
torch.manual_seed(0)
base = mlp(1024)
data = mlp_batches(rank, 64)
ml = copy.deepcopy(base); ol = torch.optim.SGD(ml.parameters(), lr=0.01)
mh = copy.deepcopy(base); oh = hvd.DistributedOptimizer(torch.optim.SGD(mh.parameters(), lr=0.01), named_parameters=mh.named_parameters())
def one(m, o, b, rec):
    x, y = b
    u0 = resource.getrusage(resource.RUSAGE_SELF); f0 = u0.ru_nvcsw + u0.ru_nivcsw
    t0 = time.perf_counter(); o.zero_grad(); t1 = time.perf_counter()
    out = m(x); loss = F.cross_entropy(out, y); t2 = time.perf_counter()
    u1 = resource.getrusage(resource.RUSAGE_SELF); f1 = u1.ru_nvcsw + u1.ru_nivcsw
    loss.backward(); t3 = time.perf_counter()
    o.step(); t4 = time.perf_counter()
    u2 = resource.getrusage(resource.RUSAGE_SELF); f2 = u2.ru_nvcsw + u2.ru_nivcsw
    rec.append((t1-t0, t2-t1, t3-t2, t4-t3, f1-f0, f2-f1))
for r in range(3):
    for name, m, o in (('local', ml, ol), ('hvd', mh, oh)):
        rec = []
        for i in range(5): one(m, o, data[i % 16], [])
        hvd.barrier()
        a = csw.snap()
        for i in range(30): one(m, o, data[i % 16], rec)
        b = csw.snap()
        if rank == 0: print(name, 'pid', os.getpid(), csw.diff(a, b))
        if rank == 0:
            print(name, ' '.join('%.0f' % (statistics.median(x[j] for x in rec) * (1e6 if j < 4 else 1)) for j in range(6)))
hvd.shutdown()
