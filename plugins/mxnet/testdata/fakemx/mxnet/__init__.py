"""A stand-in for MXNet with only what hvd.mxnet touches, for the runtime
smoke test (MXNet is not installable where hvd is tested). NDArrays are
numpy arrays; this is not MXNet and says nothing about MXNet itself."""
__version__ = '1.9.1'

from . import gluon, nd, optimizer  # noqa: E402,F401
from .nd import cpu  # noqa: E402,F401
