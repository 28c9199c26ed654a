"""Issue 27 probe: the 1.07 M-parameter MLP gradients (6 float32 tensors, one of 4 MiB) allreduced
with allreduce_many_async_ + synchronize_many, and the 4 MiB tensor alone, barrier-aligned, median of 60.
Run: PYTHONPATH=build/python bin/hvdrun -np 2 /usr/bin/python3 bench/python/fused_big.py
(HOROVOD_FUSION_THRESHOLD=0 to compare with fusion off)."""
import time, statistics, torch, sys
import hvd.torch as hvd
from hvd.torch.tensors import collectives as _c
from hvd.common.handles import synchronize_many
torch.set_num_threads(1)
hvd.init()
H=1024
ts = [torch.randn(H,16), torch.randn(H), torch.randn(H,H), torch.randn(H), torch.randn(4,H), torch.randn(4)]
R={'many':[], 'single4M':[]}
for i in range(60):
    hvd.barrier()
    t=time.perf_counter(); synchronize_many(_c.allreduce_many_async_(ts, list('abcdef'), [0]*6, hvd.Average)); R['many'].append(time.perf_counter()-t)
    hvd.barrier()
    t=time.perf_counter(); hvd.allreduce_(ts[2], op=hvd.Average, name='w'); R['single4M'].append(time.perf_counter()-t)
if hvd.rank()==0: print(' '.join('%s %.0f us'%(k,statistics.median(v)*1e6) for k,v in R.items()))
