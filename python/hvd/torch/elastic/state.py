"""TorchState (horovod.torch.elastic.state): model, optimizer, samplers and
plain attributes, kept in host memory at every commit and synced from rank 0
after a reset."""
import copy

import torch

from hvd.common.elastic import ObjectState
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from hvd.torch.mpi_ops import rank


class StateHandler:
    """Keeps one value of a TorchState: save, restore, sync, reset."""

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def __init__(self, model):
        super().__init__(model)
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_model_state)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def __init__(self, optimizer):
        super().__init__(optimizer)
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_optimizer_state)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    def __init__(self, sampler):
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_sampler_state)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), name='hvd.elastic.sampler'))

    def reset(self):
        self.value.reset()  # the world size changed: partition again


HANDLERS = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def handler_for(value):
    for cls, handler in HANDLERS:
        if isinstance(value, cls):
            return handler(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch job (Horovod's TorchState): model, optimizer and
    ElasticSamplers (any keyword whose value is one) are saved as
    state_dict copies and synced with broadcast_parameters,
    broadcast_optimizer_state and broadcast_object; other keyword arguments
    are plain attributes (ObjectState)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, rest = {}, {}
        for k, v in kwargs.items():
            h = handler_for(v)
            if h is not None:
                self._handlers[k] = h
            else:
                rest[k] = v
        for name, h in self._handlers.items():
            setattr(self, name, h.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **rest)

    def _apply_deferred(self):
        # DistributedOptimizer(overlap_forward=...) may hold updates for the
        # next forward pass: the model saved or synced must have them.
        for h in self._handlers.values():
            if isinstance(h, OptimizerStateHandler) and hasattr(h.value, '_flush'):
                h.value._flush()

    def save(self):
        self._apply_deferred()
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()

    def reset(self):
        for h in self._handlers.values():
            h.reset()
        super().reset()

    def __setattr__(self, name, value):
        if hasattr(self, '_handlers') and name in self._handlers and hasattr(self, name):
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
