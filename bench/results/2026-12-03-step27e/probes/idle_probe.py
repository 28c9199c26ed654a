import time, statistics, torch, sys
sys.path.insert(0, 'bench/python')
from steps import mlp, mlp_batches
import torch.nn.functional as F
torch.set_num_threads(1)
m = mlp(64); opt = torch.optim.SGD(m.parameters(), lr=0.01)
data = mlp_batches(0, 64)
def run(pause, busy, n=2000):
    u = []
    for i in range(n):
        x, y = data[i % len(data)]
        opt.zero_grad(); F.cross_entropy(m(x), y).backward()
        if pause:
            if busy:
                t = time.perf_counter()
                while time.perf_counter() - t < pause: pass
            else:
                time.sleep(pause)
        t0 = time.perf_counter(); opt.step(); u.append(time.perf_counter() - t0)
    return statistics.median(u) * 1e6
for rep in range(2):
    for pause, busy in ((0, 0), (0.0002, 0), (0.0002, 1), (0.001, 0)):
        print('pause %4.0f us %-5s upd median %.1f us' % (pause * 1e6, 'busy' if busy else 'sleep', run(pause, busy)))
