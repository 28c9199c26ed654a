"""hvd.torch out-of-place 64 MiB allreduce with the output allocated by torch.empty
or by numpy (hvd/torch/tensors.py _BIG_OUTPUT), alternating in one process:
PYTHONPATH=build/python bin/hvdrun -np 2 /usr/bin/python3 bench/python/big_output.py"""
import time, statistics, torch, hvd.torch as hvd
import hvd.torch.tensors as T
hvd.init()
x = torch.ones(16 * 1024 * 1024)
res = {"torch.empty": [], "numpy": []}
for i in range(12):
    mode = "numpy" if i % 2 else "torch.empty"
    T._BIG_OUTPUT = (1 << 20) if mode == "numpy" else (1 << 62)
    hvd.barrier()
    s = time.perf_counter()
    y = hvd.allreduce(x, op=hvd.Sum, name="big")
    res[mode].append((time.perf_counter() - s) * 1e3)
    assert y[0].item() == hvd.size() and y[-1].item() == hvd.size()
if hvd.rank() == 0:
    for k, v in res.items():
        print("64 MiB allreduce out of place, output by %s: median %.1f ms (n=%d)" % (k, statistics.median(v[1:]), len(v) - 1))
hvd.shutdown()
