"""Point-to-point messages between ranks: send/recv and their non-blocking
forms isend/irecv, in the shape of torch.distributed's (Horovod has none).

* ``dst``/``src`` are global ranks and must be members of ``process_set``
  (default: every rank); a rank cannot send to itself.
* Messages from one rank to another on one process set are received in the
  order they were sent. The receiver's tensor must have the sender's byte
  size, and its ``tag`` the sender's: a mismatch raises
  HorovodInternalError on the receiver (and, on shared memory, the sender)
  naming both, instead of delivering wrong data. Tags are checked, not
  searched for: unlike MPI, a receive does not skip to a later message
  with a matching tag.
* Every posted isend/irecv progresses on its own, per peer and direction,
  so posting a receive from a neighbour and a send to it in any order never
  deadlocks. A send may complete only when the receiver has the data (on
  shared memory, above 64 KiB, it always waits for the receiver), so code
  must not rely on a blocking ``send`` returning before the matching
  ``recv`` is posted: post the receive first, or use ``isend``.
* Tensors are CPU tensors, used in place (no copy when contiguous); the
  tensor given to isend/irecv must not be touched until ``synchronize``.

Autograd: ``send`` of a tensor that requires grad returns a 0-dim anchor
whose backward receives the tensor's gradient from ``dst``; ``recv(...,
requires_grad=True)`` returns a tensor whose backward sends its gradient to
``src``. Together they let a model split across ranks train with ordinary
``loss.backward()`` on the last rank and ``anchor.backward()`` on the others.
"""

import torch

from hvd.common.process_sets import global_process_set
from hvd.torch.tensors import collectives as _c


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Posts a send of ``tensor`` to global rank ``dst`` and returns a
    handle at once; ``synchronize(handle)`` waits and returns ``tensor``."""
    return _c.isend(tensor, dst, tag, process_set)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Posts a receive into ``tensor`` from global rank ``src`` and returns a
    handle at once; ``synchronize(handle)`` waits and returns ``tensor``,
    filled."""
    return _c.irecv(tensor, src, tag, process_set)


class _SendWithGrad(torch.autograd.Function):
    """Forward sends the tensor; backward receives its gradient."""

    @staticmethod
    def forward(ctx, tensor, dst, tag, process_set):
        ctx.dst, ctx.tag, ctx.process_set = dst, tag, process_set
        ctx.shape, ctx.dtype = tensor.shape, tensor.dtype
        _c.send(tensor, dst, tag, process_set)
        return torch.zeros((), dtype=tensor.dtype)

    @staticmethod
    def backward(ctx, _anchor_grad):
        grad = torch.empty(ctx.shape, dtype=ctx.dtype)
        _c.recv(grad, ctx.dst, ctx.tag, ctx.process_set)
        return grad, None, None, None


class _RecvWithGrad(torch.autograd.Function):
    """Forward returns the received values; backward sends the gradient
    back to the sender. ``anchor`` is an empty tensor that requires grad, so
    the result is part of the graph."""

    @staticmethod
    def forward(ctx, anchor, received, src, tag, process_set):
        ctx.src, ctx.tag, ctx.process_set = src, tag, process_set
        return received.clone()

    @staticmethod
    def backward(ctx, grad):
        _c.send(grad, ctx.src, ctx.tag, ctx.process_set)
        return None, None, None, None, None


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends ``tensor`` to global rank ``dst``; blocks until it is
    delivered (or buffered). When ``tensor`` requires grad and grad mode is
    on, returns an anchor: ``anchor.backward()`` (or passing it to
    ``torch.autograd.backward``) receives the gradient of ``tensor`` from
    ``dst`` — sent there by ``recv(..., requires_grad=True)`` — and
    continues the backward pass through ``tensor``'s graph. Otherwise
    returns None."""
    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled():
        return _SendWithGrad.apply(tensor, dst, tag, process_set)  # forward checks the arguments
    _c.send(tensor, dst, tag, process_set)
    return None


def recv(tensor, src, tag=0, process_set=global_process_set, requires_grad=False):
    """Receives into ``tensor`` from global rank ``src`` and returns it.
    With ``requires_grad=True`` it returns a new tensor holding the same
    values that is part of the autograd graph: when the backward pass
    reaches it, its gradient is sent back to ``src`` (same tag and set),
    where ``send``'s anchor receives it."""
    _c.recv(tensor, src, tag, process_set)
    if not requires_grad:
        return tensor
    anchor = torch.empty(0, requires_grad=True)
    return _RecvWithGrad.apply(anchor, tensor, src, tag, process_set)
