"""How hvd.common's collectives see torch tensors, and the Collectives bound
to them that hvd.torch's modules (mpi_ops, p2p, functions) share.

CPU tensors with a strided layout and one of the dtypes below are passed to
the engine by address (tensor.data_ptr()); non-contiguous ones go through a
contiguous copy (in-place ops copy the result back). Point-to-point ops work
on the tensor detached from autograd.
"""
import torch

from hvd.common import dtypes
from hvd.common.collectives import Collectives, TensorAdapter

try:
    import cloudpickle as _pickle
except ImportError:  # Debian's python3-torch does not pull it in
    import pickle as _pickle

DTYPES = {
    torch.uint8: dtypes.UINT8,
    torch.int8: dtypes.INT8,
    torch.int16: dtypes.INT16,
    torch.int32: dtypes.INT32,
    torch.int64: dtypes.INT64,
    torch.float16: dtypes.FLOAT16,
    torch.bfloat16: dtypes.BFLOAT16,
    torch.float32: dtypes.FLOAT32,
    torch.float64: dtypes.FLOAT64,
    torch.bool: dtypes.BOOL,
}


def check_tensor(tensor, what='tensor'):
    """TypeError unless tensor is a torch.Tensor; ValueError unless it is a
    strided CPU tensor of a supported dtype. Returns it."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError('%s must be a torch.Tensor, not %s' % (what, type(tensor).__name__))
    if tensor.device.type != 'cpu':
        raise ValueError('hvd: %s is on %s; this build of hvd supports CPU tensors only' % (what, tensor.device))
    if tensor.layout != torch.strided:
        raise ValueError('hvd: %s has layout %s; use sparse_allreduce_async for sparse tensors' % (what, tensor.layout))
    if tensor.dtype not in DTYPES:
        raise ValueError('Tensor type %s is not supported.' % tensor.dtype)
    return tensor


def _splits(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError('splits must be an int32 tensor, not %s' % splits.dtype)
        if splits.dim() != 1:
            raise ValueError('splits must be a 1-D tensor, not %d-D' % splits.dim())
        return splits.cpu().tolist()
    splits = list(splits)
    for s in splits:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ValueError('splits must be integers, got %r' % (s,))
    return splits


class TorchTensors(TensorAdapter):
    """The TensorAdapter of torch tensors."""

    noun = 'tensors'
    pickle = _pickle

    def input(self, tensor, what):
        return check_tensor(tensor, what)

    inplace = input

    def contiguous(self, x):
        return x if x.is_contiguous() else x.contiguous()

    def view(self, x):
        return x.detach()

    def address(self, x):
        return x.data_ptr()

    def dtype_code(self, x):
        return DTYPES[x.dtype]

    def shape(self, x):
        return list(x.shape)

    def nbytes(self, x):
        return x.numel() * x.element_size()

    def empty_like(self, x):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def clone(self, x):
        return x.clone(memory_format=torch.contiguous_format)

    def empty(self, shape, like):
        return torch.empty(shape, dtype=like.dtype)

    def copy_back(self, dst, src):
        if dst is not src:
            dst.copy_(src)
        return dst

    def splits(self, splits):
        return _splits(splits)

    def root_rank(self, root_rank):
        return int(root_rank)

    def int32_vector(self, values):
        return torch.tensor(values, dtype=torch.int32)

    def size_vector(self, values):
        return torch.IntTensor(values)

    def bytes_tensor(self, data):
        return torch.ByteTensor(bytearray(data))

    def empty_bytes(self, n):
        return torch.ByteTensor(n)

    def to_bytes(self, x):
        return x.numpy().tobytes()

    def to_list(self, x):
        return x.tolist()


collectives = Collectives(TorchTensors())
