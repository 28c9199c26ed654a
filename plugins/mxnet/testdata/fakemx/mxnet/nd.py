import numpy as np


class Context:
    def __init__(self, kind='cpu'):
        self.kind = kind


def cpu(device_id=0):
    return Context('cpu')


class NDArray:
    def __init__(self, a, ctx=None):
        self._a = np.asarray(a)
        self.context = ctx or cpu()

    @property
    def dtype(self):
        return self._a.dtype.type  # MXNet reports numpy scalar types

    @property
    def shape(self):
        return self._a.shape

    def asnumpy(self):
        return self._a.copy()

    def astype(self, dtype):
        return NDArray(self._a.astype(dtype), self.context)

    def __setitem__(self, key, value):
        self._a[key] = value.asnumpy() if isinstance(value, NDArray) else value


def array(source, ctx=None, dtype=None):
    if isinstance(source, NDArray):
        source = source.asnumpy()
    return NDArray(np.array(source, dtype=dtype), ctx)
