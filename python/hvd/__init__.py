"""hvd: Horovod's API on a Go engine.

Use a framework package: ``import hvd.torch as hvd`` is a drop-in for
``import horovod.torch as hvd``.
"""

__version__ = '0.1.0'

from hvd.runner import run  # noqa: E402,F401  (horovod.run)
