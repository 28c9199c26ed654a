"""A synthetic-data throughput benchmark in the shape of Horovod's PyTorch
benchmark script, written for horovod.torch (only the import differs): a
small convolutional network whose normalisation layers are hvd.SyncBatchNorm,
DistributedOptimizer with optional fp16 compression or Adasum, parameters
and optimizer state broadcast from rank 0, timed iterations, images/second
per rank and in total. CPU only here.

    make python
    PYTHONPATH=build/python bin/hvdrun -np 2 /usr/bin/python3 examples/pytorch/synthetic_benchmark.py
    ... --fp16-allreduce      (fp16 compression of the gradients)
    ... --use-adasum          (op=hvd.Adasum; needs a power-of-two size)

At the end every rank checks that it holds the same parameters as rank 0.
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import hvd.torch as hvd

parser = argparse.ArgumentParser(description='synthetic benchmark')
parser.add_argument('--fp16-allreduce', action='store_true', help='fp16 compression of the gradients')
parser.add_argument('--use-adasum', action='store_true', help='reduce with Adasum instead of averaging')
parser.add_argument('--batch-size', type=int, default=16)
parser.add_argument('--image-size', type=int, default=32)
parser.add_argument('--num-warmup-batches', type=int, default=2)
parser.add_argument('--num-batches-per-iter', type=int, default=3)
parser.add_argument('--num-iters', type=int, default=3)
args = parser.parse_args()

torch.set_num_threads(1)
hvd.init()
torch.manual_seed(1234 + hvd.rank())  # different data per rank; parameters come from rank 0


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), hvd.SyncBatchNorm(cout), nn.ReLU())


model = nn.Sequential(block(3, 16), nn.MaxPool2d(2), block(16, 32), nn.MaxPool2d(2), block(32, 32),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

# Adasum needs no learning-rate scaling; averaging does.
lr_scaler = 1 if args.use_adasum else hvd.size()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * lr_scaler, momentum=0.9)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression,
                                     op=hvd.Adasum if args.use_adasum else hvd.Average)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % 10


def benchmark_step():
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()


def log(s):
    if hvd.rank() == 0:
        print(s, flush=True)


log('Batch size: %d, %d CPU rank(s), %s' % (args.batch_size, hvd.size(),
                                            'adasum' if args.use_adasum else 'fp16 allreduce' if args.fp16_allreduce else 'average'))
timeit.timeit(benchmark_step, number=args.num_warmup_batches)
img_secs = []
for x in range(args.num_iters):
    t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_secs.append(args.batch_size * args.num_batches_per_iter / t)
    log('Iter #%d: %.1f img/sec per CPU' % (x, img_secs[-1]))
mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
log('Img/sec per CPU: %.1f +-%.1f' % (mean, conf))
log('Total img/sec on %d CPU(s): %.1f +-%.1f' % (hvd.size(), hvd.size() * mean, hvd.size() * conf))

# Every rank must hold rank 0's parameters (and running statistics).
state = torch.cat([v.detach().double().reshape(-1) for v in model.state_dict().values()])
ref = hvd.broadcast(state, root_rank=0, name='check.state')
assert torch.equal(state, ref), 'rank %d diverged from rank 0' % hvd.rank()
print('rank %d: parameters identical to rank 0' % hvd.rank(), flush=True)
