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


def elastic_train(steps, kill_at, commit_every, kill_size, marker=None, kill_parent=False, sleep=0.0):
    """An hvd.elastic.run loop over TorchState: every rank trains the same
    model on its own data, commits every ``commit_every`` steps; at step
    ``kill_at`` the last rank of a world of ``kill_size`` kills itself
    (SIGKILL) -- only once when ``marker`` (a file created then) is given;
    with ``kill_parent`` it kills its parent instead (the agent: a lost Spark
    task or Ray actor). ``sleep``: seconds per step. Returns (rank, size, final weights, trace of (step, world
    size) as executed, final state.batch)."""
    import os
    import signal
    import time

    import torch
    import hvd.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, batch=0)
    trace = []
    w = torch.tensor([[1.0, -2.0, 3.0, 0.5]])

    @hvd.elastic.run
    def loop(state):
        while state.batch < steps:
            b = state.batch
            if b == kill_at and hvd.size() == kill_size and hvd.rank() == kill_size - 1:
                if marker is None or not os.path.exists(marker):
                    if marker is not None:
                        open(marker, 'w').close()
                    os.kill(os.getppid() if kill_parent else os.getpid(), signal.SIGKILL)
            g = torch.Generator().manual_seed(1000 * b + hvd.rank())
            x = torch.randn(16, 4, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), x @ w.t())
            opt.zero_grad()
            loss.backward()
            opt.step()
            trace.append((b, hvd.size()))
            if sleep:
                time.sleep(sleep)
            state.batch = b + 1
            if state.batch % commit_every == 0:
                state.commit()

    loop(state)
    print('rank %d of %d finished at step %d' % (hvd.rank(), hvd.size(), state.batch))
    return hvd.rank(), hvd.size(), [p.detach().flatten().tolist() for p in model.parameters()], trace, state.batch


def check_lost_agent_rollback(trace, kill_at, commit_every, steps):
    """The batches rank 0 ran when the last rank killed its agent starting
    step kill_at: that rank's worker may finish a step or so more before it
    dies with the agent, so rank 0 completes steps 0..k-1 (k >= kill_at),
    then rolls back to the last commit before k and runs on to steps."""
    batches = [b for b, _ in trace]
    k = next(i for i in range(1, len(batches)) if batches[i] <= batches[i - 1])
    assert k >= kill_at and batches[:k] == list(range(k)), batches
    assert batches[k:] == list(range(k // commit_every * commit_every, steps)), batches
