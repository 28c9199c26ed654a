"""hvd.numpy.elastic: Horovod's elastic API over hvd.numpy (State,
ObjectState, run; see hvd.torch.elastic for PyTorch's TorchState and
ElasticSampler, and docs/elastic.md)."""
from hvd.common.elastic import HostUpdateResult, State, run_fn  # noqa: F401
from hvd.common.elastic import ObjectState as ObjectStateBase
from hvd.numpy.mpi_ops import broadcast_object, rank


class ObjectState(ObjectStateBase):
    """ObjectState over hvd.numpy's broadcast_object: ObjectState(epoch=0, ...)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)


def run(func):
    """Decorator of the training function (Horovod's hvd.elastic.run)."""
    return run_fn(func)
