"""A small hvd.torch training loop under hvdrun --autotune: trains until rank
0's autotuning log has the rows the test asks for (argv[1]: trials plus the
best), then checks that every rank holds the same parameters."""
import os
import sys

import torch

import hvd.torch as hvd

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
log, want = os.environ["HOROVOD_AUTOTUNE_LOG"], int(sys.argv[1])
torch.manual_seed(1 + hvd.rank())
for step in range(3000):
    loss = model(torch.randn(16, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    done = 0.0
    if hvd.rank() == 0 and os.path.exists(log):
        with open(log) as f:
            done = float(f.read().count("\n") >= want + 1)
    if hvd.broadcast(torch.tensor([done]), 0, name="done").item() == 1:
        break
else:
    sys.exit("the autotuning log never got %d rows" % want)
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
every = hvd.allgather(flat.unsqueeze(0), name="params")
if not all(torch.equal(every[0], every[i]) for i in range(hvd.size())):
    sys.exit("parameters differ across ranks")
print("autotuned in %d steps; parameters identical on all ranks" % (step + 1))
