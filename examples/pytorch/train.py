"""Data-parallel training with hvd.torch, written as for horovod.torch (only
the import differs). An MLP learns to classify points generated from a fixed
random "teacher" network; every rank trains on its own shard.

    make python
    PYTHONPATH=build/python bin/hvdrun -np 2 /usr/bin/python3 examples/pytorch/train.py

Shows: hvd.init with an extra process set (the even ranks, which compute a
validation metric among themselves), broadcast_parameters and
broadcast_optimizer_state from rank 0, DistributedOptimizer averaging the
gradients, a DataLoader with a worker process, falling loss, and at the end
a check that every rank holds identical parameters.
"""
import argparse
import os

import torch
import torch.nn.functional as F

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument('--epochs', type=int, default=8)
p.add_argument('--batch-size', type=int, default=64)
p.add_argument('--lr', type=float, default=0.05)
p.add_argument('--samples', type=int, default=8192)
p.add_argument('--workers', type=int, default=1, help='DataLoader worker processes (fork)')
args = p.parse_args()

torch.set_num_threads(1)  # one core per rank on small machines
n = int(os.environ.get('HOROVOD_SIZE', '1'))  # the launcher's size, to build the set before init
evens = hvd.ProcessSet(range(0, n, 2))
extra = [evens] if len(evens.ranks) < n else []  # with one rank, "evens" is the global set
hvd.init(process_sets=extra)
if not extra:
    evens = hvd.global_process_set
rank, size = hvd.rank(), hvd.size()


def dataset(seed, count):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        for prm in teacher.parameters():
            prm.copy_(torch.randn(prm.shape, generator=g))
        x = torch.randn(count, 16, generator=torch.Generator().manual_seed(seed + 1))
        y = teacher(x).argmax(1)
    return torch.utils.data.TensorDataset(x, y)


train = dataset(0, args.samples)
shard = torch.utils.data.Subset(train, range(rank, len(train), size))  # this rank's part
loader = torch.utils.data.DataLoader(shard, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                     generator=torch.Generator().manual_seed(rank))
val_x, val_y = dataset(0, 4096 + args.samples).tensors
val_x, val_y = val_x[args.samples:], val_y[args.samples:]

torch.manual_seed(rank)  # different initial weights per rank: broadcast fixes that
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

for epoch in range(args.epochs):
    model.train()
    total, count = torch.zeros(1), torch.zeros(1)
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach() * len(y)
        count += len(y)
    # the mean training loss over every rank's samples
    mean_loss = (hvd.allreduce(total, op=hvd.Sum, name='loss') / hvd.allreduce(count, op=hvd.Sum, name='count')).item()
    # validation accuracy, computed by the even ranks on their slices of the
    # validation set and averaged over that process set only
    acc = None
    if evens.included():
        model.eval()
        part = slice(evens.rank(), None, evens.size())
        with torch.no_grad():
            correct = (model(val_x[part]).argmax(1) == val_y[part]).float().mean()
        acc = hvd.allreduce(correct.view(1), op=hvd.Average, name='val.acc', process_set=evens).item()
    if rank == 0:
        print('epoch %d  loss %.4f  val_acc(even ranks %s) %.3f' % (epoch, mean_loss, evens.ranks, acc), flush=True)

flat = torch.cat([prm.detach().flatten() for prm in model.parameters()])
every = hvd.allgather(flat.view(1, -1), name='final.params')
same = all(torch.equal(every[0], every[r]) for r in range(size))
print('rank %d: parameters %s on all ranks (%d values)' % (rank, 'identical' if same else 'DIFFERENT', flat.numel()),
      flush=True)
hvd.shutdown()
if not same:
    raise SystemExit(1)
