"""Elastic data-parallel training with hvd.torch, written as for Horovod's
elastic API (hvd.elastic.run, TorchState, ElasticSampler; only the import
differs). Workers may die and come back: the survivors go back to the last
commit and train on, new workers receive the state from rank 0.

On one machine, with a discovery script that names this machine with 3
slots and a blacklist cooldown (without one, a failed worker's host, the
only one, is out for good and the job ends):

    make build python
    printf '#!/bin/sh\\necho localhost:3\\n' > /tmp/discover.sh && chmod +x /tmp/discover.sh
    bin/hvdrun -np 3 --min-np 1 --host-discovery-script /tmp/discover.sh \\
        --blacklist-cooldown-range 1 2 /usr/bin/python3 examples/pytorch/elastic_train.py --kill-one

--kill-one makes the worker of rank 1 of the first world kill itself with
SIGKILL at step 10, as a crash would: the other two go on in a world of 2,
and once the cooldown is over (2 s here) a new worker takes the free slot
and the world is 3 again. Rank 0 prints each world it enters, the loss per
epoch, and at the end checks that every rank holds the same parameters.
"""
import argparse
import os
import signal
import time

import torch
import torch.nn.functional as F

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument('--epochs', type=int, default=6)
p.add_argument('--batch-size', type=int, default=32)
p.add_argument('--lr', type=float, default=0.05)
p.add_argument('--samples', type=int, default=2048)
p.add_argument('--step-sleep', type=float, default=0.04, help='seconds per step: the run lasts well past a cooldown of 2 s and a new worker importing torch')
p.add_argument('--kill-one', action='store_true', help='rank 1 of the first world kills itself (SIGKILL) at step 10')
args = p.parse_args()

torch.set_num_threads(1)  # one core per rank on small machines
hvd.init()
# Rank 1 of the first world only: a worker started later into the free slot
# (HVD_RENDEZVOUS_EPOCH > 0) must not crash again.
killer = args.kill_one and os.environ.get('HVD_RENDEZVOUS_EPOCH', '0') == '0' and hvd.rank() == 1

g = torch.Generator().manual_seed(0)
teacher = torch.nn.Linear(16, 4)
with torch.no_grad():
    teacher.weight.copy_(torch.randn(4, 16, generator=g))
    x = torch.randn(args.samples, 16, generator=g)
    y = teacher(x).argmax(dim=1)
dataset = torch.utils.data.TensorDataset(x, y)

torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=2)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0, steps=0)


def entered():
    if hvd.rank() == 0:
        print('world of %d workers: from epoch %d batch %d (step %d)' % (hvd.size(), state.epoch, state.batch, state.steps),
              flush=True)


state.register_reset_callbacks([entered])


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
        total, count = 0.0, 0
        for xb, yb in loader:
            if killer and state.steps == 10:
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total, count = total + loss.item(), count + 1
            sampler.record_batch(state.batch, args.batch_size)
            state.batch += 1
            state.steps += 1
            state.commit()
            time.sleep(args.step_sleep)
        loss = hvd.allreduce(torch.tensor(total / max(count, 1)), name='epoch_loss').item()
        if hvd.rank() == 0:
            print('epoch %d: loss %.4f (%d workers)' % (state.epoch, loss, hvd.size()), flush=True)
        state.epoch += 1
        state.batch = 0
        sampler.set_epoch(state.epoch)
        state.commit()


entered()
train(state)
flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
everyone = hvd.allgather(flat.reshape(1, -1))
same = all(torch.equal(everyone[0], r) for r in everyone)
if hvd.rank() == 0:
    print('done: %d steps, %d workers, identical parameters on every rank: %s' % (state.steps, hvd.size(), same), flush=True)
if not same:
    raise SystemExit('parameters differ between ranks')
