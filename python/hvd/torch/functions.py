"""Parameter, optimizer-state and object helpers (horovod.torch.functions)."""
import collections

import torch

from hvd.common.process_sets import global_process_set
from hvd.torch.mpi_ops import broadcast_async_, synchronize
from hvd.torch.tensors import collectives as _c


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts the parameters from root_rank to every other process, in
    place. params: a dict (model.state_dict(), sorted by key) or a list of
    tensors or (name, tensor) pairs (model.named_parameters())."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        # support both named_parameters() and regular parameters()
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError('invalid params of type: %s' % type(params))

    handles = []
    for name, p in params:
        handles.append(broadcast_async_(p, root_rank, name, process_set=process_set))
    for handle in handles:
        synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Broadcasts an optimizer's state (tensors, plus options such as the
    learning rate) from root_rank to every other process. A new optimizer's
    state is first created by a local step with zero gradients."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('cannot broadcast torch.optim.LBFGS state')

    state_dict = optimizer.state_dict()

    # Newly created optimizers have no state: create it with a step on zero
    # gradients (the local step only: a DistributedOptimizer's step would
    # allreduce, which would deadlock unless every rank stepped).
    if len(state_dict['state']) == 0:
        for group in optimizer.param_groups:
            for p in group['params']:
                if p.requires_grad and id(p) not in state_dict['state']:
                    p.grad = p.data.new(p.size()).zero_()
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
        if optimizer.__module__ == 'hvd.torch.optimizer':  # a DistributedOptimizer
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()

    # Still empty: the optimizer is stateless, nothing to broadcast.
    if len(state_dict['state']) == 0:
        return

    params = []
    scalars = {}
    occurrences = collections.defaultdict(int)

    for index, group in enumerate(state_dict['param_groups']):
        # Options like the learning rate travel in one broadcast_object.
        for option_key, option_value in group.items():
            if option_key == 'params':
                continue
            scalars['%s.%d' % (option_key, index)] = (index, option_key, None, option_value)
        # Per-parameter state, in the model's order.
        for pid in group['params']:
            if pid not in state_dict['state']:
                continue  # requires_grad was not set: nothing to send
            param_state = state_dict['state'][pid]
            for name, p in param_state.items():
                # Names may repeat across parameters: number them.
                occurrences[name] += 1
                key = '%s.%d' % (str(name), occurrences[name])
                if torch.is_tensor(p):
                    params.append((key, p))
                else:
                    scalars[key] = (None, pid, name, p)

    broadcast_parameters(params, root_rank, process_set=process_set)
    scalars = broadcast_object(scalars, root_rank, name='optimizer_state.scalars', process_set=process_set)
    for index, a, b, value in scalars.values():
        if index is not None:
            optimizer.param_groups[index][a] = value
        else:
            # state_dict()['state'][pid] is the optimizer's own state dict
            # (and its tensors were broadcast in place).
            state_dict['state'][a][b] = value


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serializes obj with (cloud)pickle on root_rank and returns it on every
    member of the set (two broadcasts: <name>.sz and <name>.t)."""
    return _c.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Serializes obj with (cloud)pickle and returns the list of every
    member's object, in rank order (two allgathers: <name>.sz and <name>.t)."""
    return _c.allgather_object(obj, name, process_set)
