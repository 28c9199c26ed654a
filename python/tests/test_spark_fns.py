"""The functions the Spark and Ray tests run on every rank (imported by
test_spark.py and test_ray.py; the executors and actors import this module
from PYTHONPATH). No tests here."""


def train(steps):
    """A small hvd.torch model trained on each rank's own data; returns
    (rank, size, final weights as lists, the loss before and after)."""
    import torch
    import hvd.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(4, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(100 + hvd.rank())
    w = torch.tensor([[1.0, -2.0, 3.0, 0.5]])
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x @ w.t())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print('rank %d trained %d steps' % (hvd.rank(), steps))
    return hvd.rank(), hvd.size(), [p.detach().flatten().tolist() for p in model.parameters()], losses[0], losses[-1]


def fail_on_rank(bad):
    import torch
    import hvd.torch as hvd
    hvd.init()
    if hvd.rank() == bad:
        raise ValueError('boom on rank %d' % bad)
    # the others wait in a collective for the failed rank: it must not hang
    hvd.allreduce(torch.ones(3), name='never')
    return hvd.rank()
