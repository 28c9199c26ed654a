# Horovod's examples/mxnet/mxnet_mnist.py (Gluon, MXNet 1.x), rewritten for
# hvd: the only hvd-specific line is the import (horovod.mxnet ->
# hvd.mxnet). Differences from Horovod's, none of them hvd's: the data are
# synthetic MNIST-shaped images whose label is a function of the image (the
# CI machines do not download MNIST), sharded with NDArrayIter, and the run
# asserts that training accuracy rose instead of a validation threshold.
import argparse
import logging
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import hvd.mxnet as hvd

parser = argparse.ArgumentParser(description='MXNet MNIST Example')
parser.add_argument('--batch-size', type=int, default=64, help='training batch size')
parser.add_argument('--dtype', type=str, default='float32', help='training data type')
parser.add_argument('--epochs', type=int, default=5, help='number of training epochs')
parser.add_argument('--lr', type=float, default=0.01, help='learning rate')
parser.add_argument('--momentum', type=float, default=0.9, help='SGD momentum')
parser.add_argument('--samples', type=int, default=4096, help='synthetic training samples per worker')
parser.add_argument('--no-cuda', action='store_true', default=False, help='train on the CPU')
args = parser.parse_args()
if not args.no_cuda and not mx.test_utils.list_gpus():
    args.no_cuda = True
logging.basicConfig(level=logging.INFO)


def get_mnist_iterator(rank):
    rng = np.random.default_rng(rank)
    images = rng.random((args.samples, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, args.samples)
    images[np.arange(args.samples), 0, labels * 2, :] += 1.0  # the label is the bright row band
    train = mx.io.NDArrayIter(images, labels.astype(np.float32), args.batch_size, shuffle=True)
    return train


def conv_nets():
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(gluon.nn.Conv2D(channels=8, kernel_size=5, activation='relu'))
        net.add(gluon.nn.MaxPool2D(pool_size=2, strides=2))
        net.add(gluon.nn.Flatten())
        net.add(gluon.nn.Dense(64, activation='relu'))
        net.add(gluon.nn.Dense(10))
    return net


hvd.init()
context = mx.cpu(hvd.local_rank()) if args.no_cuda else mx.gpu(hvd.local_rank())
train_data = get_mnist_iterator(hvd.rank())

model = conv_nets()
model.cast(args.dtype)
model.hybridize()
optimizer_params = {'momentum': args.momentum, 'learning_rate': args.lr * hvd.size()}
opt = mx.optimizer.create('sgd', **optimizer_params)
model.initialize(mx.init.Xavier(rnd_type='gaussian', factor_type='in', magnitude=2), ctx=context)
model(mx.nd.zeros((1, 1, 28, 28), ctx=context))  # create the deferred parameters before the broadcast

# Start every worker from rank 0's parameters.
params = model.collect_params()
if params is not None:
    hvd.broadcast_parameters(params, root_rank=0)

# A gluon.Trainer whose gradients are averaged over the workers.
trainer = hvd.DistributedTrainer(params, opt)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
metric = mx.metric.Accuracy()

accs = []
for epoch in range(args.epochs):
    tic = time.time()
    train_data.reset()
    metric.reset()
    for nbatch, batch in enumerate(train_data, start=1):
        data = batch.data[0].as_in_context(context)
        label = batch.label[0].as_in_context(context)
        with autograd.record():
            output = model(data.astype(args.dtype, copy=False))
            loss = loss_fn(output, label)
        loss.backward()
        trainer.step(args.batch_size)
        metric.update([label], [output])
    name, acc = metric.get()
    accs.append(acc)
    if hvd.rank() == 0:
        elapsed = time.time() - tic
        logging.info('Epoch[%d]\tSpeed=%.2f samples/s\tTime cost=%f\tTrain: %s=%f', epoch,
                     nbatch * args.batch_size * hvd.size() / elapsed, elapsed, name, acc)

assert accs[-1] > accs[0] and accs[-1] > 0.5, accs
digest = sum(float(p.data().astype('float64').sum().asscalar()) for _, p in sorted(params.items()))
print('rank %d weights digest %.10e accuracy %.4f' % (hvd.rank(), digest, accs[-1]), flush=True)
