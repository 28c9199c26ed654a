"""How hvd.common's collectives see numpy arrays, and the Collectives bound
to them that hvd.numpy (and through it the TensorFlow and MXNet modules)
uses.

An aligned C-contiguous array is handed to the engine by address; other
arrays (non-contiguous views, unaligned buffers) go through a contiguous
copy, copied back for in-place ops. Inputs may be array-likes (lists,
scalars), converted with numpy.asarray; arrays written in place must be
writable ndarrays. Element types: the dtypes below, and bfloat16 when the
array's dtype is named so (ml_dtypes); native byte order only.
"""
import numbers
import pickle

import numpy as np

from hvd.common import dtypes
from hvd.common.collectives import Collectives, TensorAdapter

DTYPES = {
    np.dtype(np.uint8): dtypes.UINT8,
    np.dtype(np.int8): dtypes.INT8,
    np.dtype(np.uint16): dtypes.UINT16,
    np.dtype(np.int16): dtypes.INT16,
    np.dtype(np.int32): dtypes.INT32,
    np.dtype(np.int64): dtypes.INT64,
    np.dtype(np.float16): dtypes.FLOAT16,
    np.dtype(np.float32): dtypes.FLOAT32,
    np.dtype(np.float64): dtypes.FLOAT64,
    np.dtype(np.bool_): dtypes.BOOL,
}


def dtype_code(dtype, what):
    """The library's code for a numpy dtype; ValueError (naming what) for
    one the engine does not take."""
    code = DTYPES.get(dtype)
    if code is not None:
        return code
    if dtype.name == 'bfloat16':
        return dtypes.BFLOAT16
    if dtype.byteorder not in ('=', '|') and dtype.newbyteorder('=') in DTYPES:
        raise ValueError('hvd: %s has non-native byte order (%s); convert it with '
                         'a.astype(a.dtype.newbyteorder("="))' % (what, dtype.str))
    raise ValueError('Tensor type %s is not supported (%s).' % (dtype, what))


def as_array(tensor, what='tensor'):
    """An ndarray for an input: arrays as they are, array-likes converted."""
    if isinstance(tensor, np.ndarray):
        arr = tensor
    else:
        if tensor is None or isinstance(tensor, (str, bytes, dict)):
            raise TypeError('%s must be a numpy array (or array-like), not %s' % (what, type(tensor).__name__))
        arr = np.asarray(tensor)
        if arr.dtype == object:
            raise TypeError('%s is not a numeric array-like: %r' % (what, tensor))
    dtype_code(arr.dtype, what)
    return arr


def check_inplace(tensor, what='tensor'):
    """tensor, when it is a writable ndarray of a supported dtype."""
    if not isinstance(tensor, np.ndarray):
        raise TypeError('%s must be a numpy array for an in-place op, not %s' % (what, type(tensor).__name__))
    if not tensor.flags.writeable:
        raise ValueError('hvd: %s is read-only; an in-place op writes its result into it' % what)
    dtype_code(tensor.dtype, what)
    return tensor


def contiguous(arr):
    """arr itself when the engine can use its memory, else a contiguous copy."""
    if arr.flags.c_contiguous and arr.flags.aligned:
        return arr
    return np.ascontiguousarray(arr)


def _splits(splits):
    if splits is None:
        return None
    if isinstance(splits, np.ndarray):
        if splits.ndim != 1:
            raise ValueError('splits must be a 1-D array, not %d-D' % splits.ndim)
        if splits.dtype.kind not in 'iu':
            raise ValueError('splits must hold integers, not %s' % splits.dtype)
        return [int(s) for s in splits]
    out = []
    for s in splits:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise ValueError('splits must be integers, got %r' % (s,))
        out.append(int(s))
    return out


class NumpyArrays(TensorAdapter):
    """The TensorAdapter of numpy arrays."""

    noun = 'arrays'
    pickle = pickle

    def input(self, tensor, what):
        return as_array(tensor, what)

    def inplace(self, tensor, what):
        return check_inplace(tensor, what)

    def contiguous(self, x):
        return contiguous(x)

    def address(self, x):
        return x.ctypes.data

    def dtype_code(self, x):
        return dtype_code(x.dtype, 'tensor')

    def shape(self, x):
        return list(x.shape)

    def nbytes(self, x):
        return x.nbytes

    def empty_like(self, x):
        return np.empty(x.shape, dtype=x.dtype)

    def clone(self, x):
        return np.array(x, order='C', copy=True)

    def empty(self, shape, like):
        return np.empty(shape, dtype=like.dtype)

    def copy_back(self, dst, src):
        if dst is not src:
            np.copyto(dst, src)
        return dst

    def splits(self, splits):
        return _splits(splits)

    def root_rank(self, root_rank):
        if isinstance(root_rank, bool) or not isinstance(root_rank, numbers.Integral):
            raise ValueError('root_rank must be an integer (a global rank), not %r' % (root_rank,))
        return int(root_rank)

    def int32_vector(self, values):
        return np.array(values, dtype=np.int32)

    def size_vector(self, values):
        return np.array(values, dtype=np.int64)

    def bytes_tensor(self, data):
        return np.frombuffer(data, dtype=np.uint8).copy()

    def empty_bytes(self, n):
        return np.empty(n, dtype=np.uint8)

    def to_bytes(self, x):
        return x.tobytes()

    def to_list(self, x):
        return [int(v) for v in x]


collectives = Collectives(NumpyArrays())
