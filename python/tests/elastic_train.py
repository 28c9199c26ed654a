"""A small elastic training job for e2e TestPythonElasticDriver: run by
hvdrun's elastic driver (docs/elastic.md). HVD_TEST_SCENARIO picks what
happens at batch 3 of the first world:

- fail / kill: the worker 127.0.0.1:0 exits 1 / is killed by SIGKILL (its
  host is blacklisted; the others restore the last commit and go on in a
  world of 2);
- grow / shrink: rank 0 creates HVD_TEST_FLAG, which makes the discovery
  script add / remove the host 127.0.0.1 (a host update at a later commit);
  training goes on until the world has changed.

Every worker prints "enter size S rank R batch B" when the training function
starts in a world and "done size S batch B same=True|False sets=..." at the
end (same: every rank holds the same parameters).
"""
import os
import signal
import time

import torch

import hvd.torch as hvd

SCENARIO = os.environ['HVD_TEST_SCENARIO']
FLAG = os.environ.get('HVD_TEST_FLAG', '')
WID = os.environ['HVD_ELASTIC_WORKER_ID']

HEAD = hvd.ProcessSet(lambda size: range(size - 1))
hvd.init(process_sets=[HEAD])
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
state = hvd.elastic.TorchState(model, opt, batch=0)


def more(state):
    if state.batch < 20:
        return True
    # grow/shrink: until the host update has happened (bounded by batch 2000);
    # the same answer on every rank, a worker that joined later included.
    waiting = (SCENARIO == 'grow' and hvd.size() < 3) or (SCENARIO == 'shrink' and hvd.size() > 2)
    return waiting and state.batch < 2000


@hvd.elastic.run
def train(state):
    print('enter size %d rank %d batch %d' % (hvd.size(), hvd.rank(), state.batch), flush=True)
    while more(state):
        if state.batch == 3:
            if SCENARIO == 'fail' and WID == '127.0.0.1:0':
                os._exit(1)
            if SCENARIO == 'kill' and WID == '127.0.0.1:0':
                os.kill(os.getpid(), signal.SIGKILL)
            if SCENARIO in ('grow', 'shrink') and hvd.rank() == 0 and not os.path.exists(FLAG):
                open(FLAG, 'w').close()
        torch.manual_seed(state.batch)
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            hvd.allreduce_(p.grad, name='grad')
        opt.step()
        state.batch += 1
        state.commit()
        if SCENARIO in ('grow', 'shrink') and state.batch >= 3:
            time.sleep(0.05)  # discovery runs once a second
    w = hvd.allgather(model.weight.detach().reshape(1, -1))
    same = all(torch.equal(w[0], x) for x in w)
    print('done size %d batch %d same=%s sets=%s' % (hvd.size(), state.batch, same, HEAD.ranks), flush=True)


train(state)
