import time, statistics, torch, hvd.torch as hvd
torch.set_num_threads(1)
hvd.init()
tensors=[torch.zeros(1024) for _ in range(200)]; names=['g.%d'%i for i in range(200)]
E,F,L,R,T=[],[],[],[],[]
for i in range(80):
    hvd.barrier()
    t0=time.perf_counter()
    hs=[hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t,n in zip(tensors,names)]
    t1=time.perf_counter()
    hvd.synchronize(hs[0])
    t2=time.perf_counter()
    hvd.synchronize(hs[-1])
    t3=time.perf_counter()
    for h in hs[1:-1]: hvd.synchronize(h)
    t4=time.perf_counter()
    if i>=10: E.append(t1-t0); F.append(t2-t1); L.append(t3-t2); R.append(t4-t3); T.append(t4-t0)
m=lambda x: statistics.median(x)*1e3
print('rank %d: batch %.3f ms = enqueue %.3f + first %.3f + last %.3f + 198 done %.3f' % (hvd.rank(), m(T), m(E), m(F), m(L), m(R)))
hvd.shutdown()
