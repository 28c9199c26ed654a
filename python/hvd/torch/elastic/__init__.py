"""hvd.torch.elastic: Horovod's elastic API for PyTorch (horovod.torch.elastic).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, state.batch): ...
                state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    train(state)

See docs/elastic.md (the protocol, the worker API, process sets through
resets).
"""
from hvd.common.elastic import HostUpdateResult, State, run_fn  # noqa: F401
from hvd.common.elastic import ObjectState as ObjectStateBase
from hvd.torch.elastic.sampler import ElasticSampler  # noqa: F401
from hvd.torch.elastic.state import TorchState  # noqa: F401
from hvd.torch.functions import broadcast_object
from hvd.torch.mpi_ops import rank


class ObjectState(ObjectStateBase):
    """ObjectState over torch's broadcast_object: ObjectState(epoch=0, ...)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)


def run(func):
    """Decorator of the training function (Horovod's hvd.elastic.run): syncs
    the state from rank 0, calls func(state, ...), and on a failure
    (HorovodInternalError: restore the last commit) or a host update
    (HostsUpdatedInterrupt) resets into the next world and goes on."""
    return run_fn(func)
