"""How hvd.common's collectives see torch tensors, and the Collectives bound
to them that hvd.torch's modules (mpi_ops, p2p, functions) share.

CPU tensors with a strided layout and one of the dtypes below are passed to
the engine by address (tensor.data_ptr()); non-contiguous ones go through a
contiguous copy (in-place ops copy the result back). Point-to-point ops work
on the tensor detached from autograd.

CUDA tensors take the host-staged path (hvd's C ABI does not carry a
device yet, so NCCL is not used from Python: nccl_built() is 0): every op
copies its CUDA inputs into host memory (pinned, so the copies are DMA),
runs on the CPU planes, and hands back results on the input's device; an
in-place op copies the host result back into the caller's CUDA tensor.
The device-to-host copy synchronizes with the tensor's stream, so kernels
that produced it have finished. docs/gpu.md says what a GPU has run.
"""
import os
import re

import numpy as _np
import torch

from hvd.common import dtypes, fastpath
from hvd.common.collectives import Collectives, TensorAdapter, call_allreduce
from hvd.common.handles import convert_result, handle_map, synchronize
from hvd.common.ops import Adasum, Average, REDUCE_OPS
from hvd.common.process_sets import ProcessSet, global_process_set

try:
    import cloudpickle as _pickle
except ImportError:  # Debian's python3-torch does not pull it in
    import pickle as _pickle

# Outputs of at least this many bytes are allocated by numpy and shared
# with torch (torch.from_numpy): numpy asks the kernel for transparent huge
# pages for large arrays and torch does not, and a new output's first touch
# is a page fault per page. Measured here (64 MiB float32, allocate + write):
# torch.empty 26 ms, numpy 4 ms; hvd.torch's out-of-place allreduce of 64
# MiB spent most of its time there (docs/performance.md). The tensor is an
# ordinary contiguous CPU tensor; only resize_() is refused (its storage is
# numpy's).
_BIG_OUTPUT = 1 << 20


def _host_empty(shape, dtype):
    """An uninitialized contiguous CPU tensor of shape and dtype in
    numpy-allocated memory, 64-byte aligned (as torch's allocator)."""
    nbytes = 1
    for d in shape:
        nbytes *= int(d)
    nbytes *= torch.empty((), dtype=dtype).element_size()
    buf = _np.empty(nbytes + 64, dtype=_np.uint8)
    off = (-buf.ctypes.data) % 64
    return torch.from_numpy(buf[off:off + nbytes]).view(dtype).view(tuple(shape))


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


if hasattr(torch.Tensor, 'is_cpu'):
    def _on_cpu(t):
        return t.is_cpu  # a flag read; t.device builds a torch.device each time
else:  # torch before 1.13
    def _on_cpu(t):
        return t.device.type == 'cpu'


def check_tensor(tensor, what='tensor'):
    """TypeError unless tensor is a torch.Tensor; ValueError unless it is a
    strided CPU tensor of a supported dtype. Returns it."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError('%s must be a torch.Tensor, not %s' % (what, type(tensor).__name__))
    if not (_on_cpu(tensor) or tensor.is_cuda):
        raise ValueError('hvd: %s is on %s; hvd supports CPU and CUDA tensors' % (what, tensor.device))
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
        if x.numel() * x.element_size() >= _BIG_OUTPUT and _on_cpu(x):
            return _host_empty(x.shape, x.dtype)
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def clone(self, x):
        return x.clone(memory_format=torch.contiguous_format)

    def empty(self, shape, like):
        n = 1
        for d in shape:
            n *= int(d)
        if n * like.element_size() >= _BIG_OUTPUT:
            return _host_empty(shape, like.dtype)
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


def is_cuda(x):
    return isinstance(x, torch.Tensor) and x.is_cuda


def to_host(x):
    """A host copy of CUDA tensor x (pinned when CUDA is up, so the copy is
    DMA and the copy back can be too). Synchronous: x's producers finished."""
    if torch.cuda.is_available():
        host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        host.copy_(x.detach())
        return host
    return x.detach().cpu()


def to_device(host, like):
    """host's contents on like's device (a new tensor)."""
    return host.to(like.device)


def _restage(result, likes):
    """Moves an op's result back to the devices of the tensors it came from:
    a tensor, a list (grouped ops) or alltoall's (output, splits) pair."""
    if isinstance(result, list):
        return [_restage(r, [l]) for r, l in zip(result, likes)]
    if isinstance(result, tuple):
        return (_restage(result[0], likes),) + tuple(result[1:])
    like = likes[0]
    if like is None or not is_cuda(like) or not isinstance(result, torch.Tensor):
        return result
    return to_device(result, like)


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_FAST_OPS = tuple(op for op in REDUCE_OPS if op != Adasum)
_REAL = (float, int)
_INT32 = 1 << 31


def _fast_args(tensor, average, op, prescale_factor, postscale_factor, process_set, priority):
    """(dtype code, op, prescale, postscale, set id) when an allreduce of
    tensor with these arguments passes every check of the general path and
    needs nothing from it: a plain contiguous CPU tensor of a supported
    dtype, no average=, a reduce op other than Adasum, real scale factors, a
    registered set, an int32 priority. None otherwise (the general path then
    checks, and raises where it should)."""
    if (average is not None or type(tensor) not in _PLAIN or type(process_set) is not ProcessSet
            or type(priority) is not int or type(prescale_factor) not in _REAL
            or type(postscale_factor) not in _REAL):
        return None
    if op is None:
        op = Average
    elif type(op) is not int or op not in _FAST_OPS:
        return None
    code = DTYPES.get(tensor.dtype)
    pid = process_set.process_set_id
    if (code is None or pid is None or not -_INT32 <= priority < _INT32 or not _on_cpu(tensor)
            or tensor.layout is not torch.strided or not tensor.is_contiguous()):
        return None
    return code, op, float(prescale_factor), float(postscale_factor), pid


def _torch_release(version):
    """(major, minor, patch) of a torch version string ('1.13.0a0+git...')."""
    m = re.match(r'(\d+)(?:\.(\d+))?(?:\.(\d+))?', version)
    return tuple(int(x or 0) for x in m.groups()) if m else (0, 0, 0)


def _tensor_info():
    """(capsule, scalar-type table) of hvd/torch/_tensorinfo.cpp, which
    reads a tensor's dtype, layout, device, contiguity, shape and address
    from the at::Tensor itself, or None: not built, built for another torch
    (it reads torch's C++ objects), turned off with HVD_PY_TENSORINFO=0, or
    its answers differ from the Python attributes on sample tensors. The
    table maps torch's scalar type numbers to hvd's dtype codes (-1: not
    supported)."""
    if os.environ.get('HVD_PY_TENSORINFO', '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return None
    try:
        from hvd.torch import _tensorinfo
    except ImportError:
        return None
    if _tensorinfo.version() != _torch_release(torch.__version__):
        return None
    codes = {}
    for dtype, code in DTYPES.items():
        d = _tensorinfo.describe(torch.empty(0, dtype=dtype))
        if d is None:
            return None
        codes[d[0]] = code
    if len(codes) != len(DTYPES):
        return None  # two dtypes read as one scalar type
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    samples = [base, base[1:], base[:, 2:], base.t(), torch.tensor(3.0), torch.zeros(0, 3),
               torch.nn.Parameter(torch.ones(2, 2)), torch.ones(2, 3, dtype=torch.int16)[1],
               torch.zeros(8)[::2], torch.zeros(2, 3).to_sparse()]
    for t in samples:
        plain = t.layout is torch.strided and _on_cpu(t) and t.is_contiguous()
        want = (t.shape, t.data_ptr(), DTYPES.get(t.dtype)) if plain else None
        d = _tensorinfo.describe(t)
        got = None if d is None else (torch.Size(d[1]), d[2], codes.get(d[0]))
        if got != want:
            return None
    table = [-1] * (max(codes) + 1)
    for st, code in codes.items():
        table[st] = code
    return _tensorinfo.info, tuple(table)


# The C form of that check and call (hvd/common/_fastpath.c), or None.
_fp = fastpath.load(handle_map, *_PLAIN, ProcessSet, DTYPES, torch.strided, _FAST_OPS,
                    Average, _tensor_info())

# The same, for hvd.torch.mpi_ops's C entries (fastpath.entry).
c_path = _fp


class StagedCollectives(Collectives):
    """Collectives whose async ops stage CUDA tensors through host memory
    (the module docstring). CPU tensors pass through untouched; a grouped
    op may mix both (each result goes back where its input was)."""

    def _stage(self, tensors):
        return [to_host(t) if is_cuda(t) else t for t in tensors]

    def _staged(self, method, tensor, in_place, *args):
        """method(tensor-or-list, *args) on host copies; the handle's result
        converted back (in place: copied into the caller's tensors)."""
        grouped = isinstance(tensor, (list, tuple))
        originals = list(tensor) if grouped else [tensor]
        if not any(is_cuda(t) for t in originals):
            return method(tensor, *args)
        hosts = self._stage(originals)
        handle = method(hosts if grouped else hosts[0], *args)
        if in_place:
            def back(result):
                for orig, host in zip(originals, hosts):
                    if is_cuda(orig):
                        orig.copy_(host)
                return originals if grouped else originals[0]
        else:
            likes = [t if is_cuda(t) else None for t in originals]

            def back(result):
                return _restage(result, likes if grouped else likes[:1])
        return convert_result(handle, (originals, hosts), back)

    def _allreduce_sync(self, tensor, in_place, name, op, prescale_factor, postscale_factor, process_set,
                        priority=0):
        # The one-call synchronous allreduce hands the tensor's memory to
        # the library: a CUDA tensor goes through the staged async path.
        if _fp is not None and (in_place or type(tensor) in _PLAIN and tensor.device.type == 'cpu'):
            # In place, or (hvd.allreduce's new tensor) into a fresh one:
            # one C call either way (the general path costs about 2x an 8 B
            # op's latency in Python frames and ctypes, issue 27).
            out = None if in_place else torch.empty_like(tensor, memory_format=torch.contiguous_format)
            r = _fp.allreduce(tensor, in_place, True, None, name, op, prescale_factor, postscale_factor, process_set,
                              priority, out)
            if r is (tensor if in_place else out):
                return r
            if r is not None:
                fastpath.raise_refused(r)
        if not is_cuda(tensor):
            return super()._allreduce_sync(tensor, in_place, name, op, prescale_factor, postscale_factor,
                                           process_set, priority)
        start = self.allreduce_async_ if in_place else self.allreduce_async
        return synchronize(start(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, process_set=process_set, priority=priority))

    # The async allreduces of a plain tensor take a short route: the checks
    # of the general path that such a tensor and the usual arguments pass,
    # done inline, and one library call (the per-op cost of a batch of async
    # ops: issue 27). Anything else -- a subclass, a CUDA, sparse or
    # non-contiguous tensor, average=, Adasum, an unregistered set, odd
    # argument types -- takes the general path, which checks and raises.
    def allreduce_async(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set, priority=0):
        fast = _fast_args(tensor, average, op, prescale_factor, postscale_factor, process_set, priority)
        if fast is not None:
            out = self.fw.empty_like(tensor)
            handle = call_allreduce(False, tensor.data_ptr(), out.data_ptr(), fast[0], tensor.shape, fast[1],
                                     fast[2], fast[3], fast[4], name, priority)
            handle_map[handle] = ((tensor, out), lambda: out)
            return handle
        if not is_cuda(tensor):
            return Collectives.allreduce_async(self, tensor, average, name, op, prescale_factor, postscale_factor,
                                               process_set, priority)
        return self._staged(lambda t: super(StagedCollectives, self).allreduce_async(
            t, average, name, op, prescale_factor, postscale_factor, process_set, priority), tensor, False)

    def allreduce_async_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0, process_set=global_process_set, priority=0):
        if _fp is not None:
            r = _fp.allreduce(tensor, True, False, average, name, op, prescale_factor, postscale_factor, process_set,
                              priority)
            if type(r) is int:
                return r
            if r is not None:
                fastpath.raise_refused(r)
            fast = None  # the C path declined: the same rules as _fast_args
        else:
            fast = _fast_args(tensor, average, op, prescale_factor, postscale_factor, process_set, priority)
        if fast is not None:
            ptr = tensor.data_ptr()
            handle = call_allreduce(False, ptr, ptr, fast[0], tensor.shape, fast[1], fast[2], fast[3], fast[4],
                                     name, priority)
            handle_map[handle] = (tensor, None)  # synchronize returns the tensor
            return handle
        if not is_cuda(tensor):
            return Collectives.allreduce_async_(self, tensor, average, name, op, prescale_factor, postscale_factor,
                                                process_set, priority)
        return self._staged(lambda t: super(StagedCollectives, self).allreduce_async_(
            t, average, name, op, prescale_factor, postscale_factor, process_set, priority), tensor, True)

    def grouped_allreduce_async(self, tensors, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).grouped_allreduce_async(t, *args, **kwargs),
                            tensors, False)

    def grouped_allreduce_async_(self, tensors, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).grouped_allreduce_async_(t, *args, **kwargs),
                            tensors, True)

    def allgather_async(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).allgather_async(t, *args, **kwargs), tensor, False)

    def grouped_allgather_async(self, tensors, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).grouped_allgather_async(t, *args, **kwargs),
                            tensors, False)

    def broadcast_async(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).broadcast_async(t, *args, **kwargs), tensor, False)

    def broadcast_async_(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).broadcast_async_(t, *args, **kwargs), tensor, True)

    def alltoall_async(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).alltoall_async(t, *args, **kwargs), tensor, False)

    def reducescatter_async(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).reducescatter_async(t, *args, **kwargs), tensor,
                            False)

    def grouped_reducescatter_async(self, tensors, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).grouped_reducescatter_async(t, *args, **kwargs),
                            tensors, False)

    def isend(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).isend(t, *args, **kwargs), tensor, False)

    def irecv(self, tensor, *args, **kwargs):
        return self._staged(lambda t: super(StagedCollectives, self).irecv(t, *args, **kwargs), tensor, True)

    def send(self, tensor, *args, **kwargs):
        return super().send(to_host(tensor) if is_cuda(tensor) else tensor, *args, **kwargs)

    def recv(self, tensor, *args, **kwargs):
        if not is_cuda(tensor):
            return super().recv(tensor, *args, **kwargs)
        host = to_host(tensor)
        super().recv(host, *args, **kwargs)
        tensor.copy_(host)
        return tensor


collectives = StagedCollectives(TorchTensors())
