"""A stand-in for TensorFlow 2 in eager mode with only what hvd.tensorflow
touches, for the runtime smoke test (TensorFlow is not installable where
hvd is tested). Tensors are numpy arrays; custom_gradient drops the
gradient function; GradientTape.gradient returns its target as the
gradients (a test hook). This is not TensorFlow and says nothing about it."""
import numpy as _np

__version__ = '2.15.0'


class DType:
    def __init__(self, name):
        self._np = _np.dtype(name)
        self.name = self._np.name

    @property
    def is_floating(self):
        return self._np.kind == 'f'

    def __eq__(self, other):
        return isinstance(other, DType) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return 'tf.' + self.name


def as_dtype(x):
    return x if isinstance(x, DType) else DType(x)


for _n in ('uint8', 'int8', 'int16', 'int32', 'int64', 'float16', 'float32', 'float64', 'bool', 'complex64'):
    globals()[_n] = DType(_n)


class Tensor:
    def __init__(self, a):
        self._a = _np.asarray(a)

    @property
    def dtype(self):
        return as_dtype(self._a.dtype)

    @property
    def shape(self):
        return self._a.shape

    def numpy(self):
        return self._a

    def set_shape(self, shape):
        if tuple(shape) != self._a.shape:
            raise ValueError('set_shape %s on a tensor of shape %s' % (tuple(shape), self._a.shape))

    def __truediv__(self, other):
        return Tensor(self._a / convert_to_tensor(other).numpy())

    def __mul__(self, other):
        return Tensor(self._a * convert_to_tensor(other).numpy())


class Variable:
    def __init__(self, initial, name='Variable:0'):
        self._v = _np.array(initial)
        self.name = name

    @property
    def dtype(self):
        return as_dtype(self._v.dtype)

    @property
    def shape(self):
        return self._v.shape

    def read_value(self):
        return Tensor(self._v.copy())

    def numpy(self):
        return self._v.copy()

    def assign(self, value):
        self._v[...] = convert_to_tensor(value).numpy()


class IndexedSlices:
    def __init__(self, values, indices, dense_shape=None):
        self.values, self.indices, self.dense_shape = values, indices, dense_shape


def convert_to_tensor(x, dtype=None):
    if isinstance(x, Variable):
        x = x.read_value()
    if isinstance(x, IndexedSlices):
        dense = _np.zeros(x.dense_shape, dtype=x.values.numpy().dtype)
        _np.add.at(dense, x.indices.numpy(), x.values.numpy())
        return Tensor(dense)
    if isinstance(x, Tensor) and dtype is None:
        return x
    a = x.numpy() if isinstance(x, Tensor) else x
    return Tensor(_np.asarray(a, dtype=None if dtype is None else as_dtype(dtype)._np))


def cast(x, dtype):
    return Tensor(convert_to_tensor(x).numpy().astype(as_dtype(dtype)._np))


def shape(x, out_type=None):
    return Tensor(_np.array(x.shape, dtype=_np.int32 if out_type is None else as_dtype(out_type)._np))


def reshape(x, shp):
    shp = shp.numpy() if isinstance(shp, Tensor) else shp
    return Tensor(_np.reshape(convert_to_tensor(x).numpy(), tuple(int(s) for s in shp)))


def zeros(shp, dtype=float32):
    return Tensor(_np.zeros(shp, dtype=as_dtype(dtype)._np))


def executing_eagerly():
    return True


def custom_gradient(f):
    def call(*args):
        y, _grad = f(*args)
        return y
    return call


def py_function(func, inp, Tout):
    raise RuntimeError('the TensorFlow stand-in has no graph mode')


class GradientTape:
    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._tape = object()
        self._persistent = persistent
        self._watch_accessed_variables = watch_accessed_variables

    def gradient(self, target, sources, output_gradients=None):
        return [None if g is None else convert_to_tensor(g) for g in target]


class nest:
    @staticmethod
    def flatten(x):
        return list(x) if isinstance(x, (list, tuple)) else [x]

    @staticmethod
    def pack_sequence_as(structure, flat):
        return type(structure)(flat) if isinstance(structure, (list, tuple)) else flat[0]
