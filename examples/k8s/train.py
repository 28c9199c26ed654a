"""A small hvd.torch training job that runs unchanged under every launcher
hvd recognises: hvdrun, srun (Slurm), mpirun (Kubeflow MPIJob), and the
torch-style environment of a Kubeflow PyTorchJob (MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE). Every rank prints one line

    hvd-train rank=R size=S local_rank=L first_collective=T loss=X weights=SHA

where T is the wall-clock time (time.time()) at which the first collective
(the broadcast of the initial weights) completed on that rank, and SHA the
SHA-256 of the final weights: identical on every rank when the gradients
were averaged. The engine tests (e2e/engines_*_test.go) check those lines.
"""
import argparse
import hashlib
import os
import time

import torch
import torch.nn.functional as F

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument('--steps', type=int, default=20)
p.add_argument('--lr', type=float, default=0.1)
args = p.parse_args()

torch.set_num_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()

torch.manual_seed(rank)  # different initial weights per rank: the broadcast fixes that
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
first = time.time()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr),
                               named_parameters=model.named_parameters())
g = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
w_true = torch.arange(8, dtype=torch.float32) / 8
loss = None
for step in range(args.steps):
    x = torch.randn(32, 8, generator=g)
    y = (x @ w_true).unsqueeze(1)
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
mean_loss = hvd.allreduce(loss.detach(), name='loss').item()
digest = hashlib.sha256(b''.join(t.detach().numpy().tobytes() for t in model.state_dict().values())).hexdigest()[:16]
print('hvd-train rank=%d size=%d local_rank=%d first_collective=%.6f loss=%.6f weights=%s'
      % (rank, size, hvd.local_rank(), first, mean_loss, digest), flush=True)
hvd.shutdown()
