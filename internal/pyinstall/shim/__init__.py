"""horovod: hvd standing in for Horovod, so that unmodified Horovod scripts run.

Installed by ``hvdgen plugin install --provide-horovod``; listed in hvd's RECORD,
so ``hvdgen plugin uninstall`` and ``pip uninstall hvd`` remove it.

Every module ``horovod.X`` is hvd's ``hvd.X`` itself -- the same module object,
not a copy: ``import horovod.torch as hvd`` gives ``hvd.torch``,
``horovod.torch.mpi_ops`` is ``hvd.torch.mpi_ops`` (with its ``_basics``),
``horovod.tensorflow`` and ``horovod.mxnet`` are hvd's when their framework is
installed, and attributes of ``horovod`` itself (``horovod.run``) are those of
``hvd``. A module hvd does not have (``horovod.keras``, say) is not importable.
"""
import importlib
import importlib.abc
import importlib.util
import sys

import hvd as _hvd

# Marks this package as hvd's shim, not Horovod (hvdgen looks for this name).
__hvd_shim__ = True
__version__ = _hvd.__version__
__path__ = []  # nothing is imported from this directory: the finder below answers

_PREFIX = __name__ + '.'


def _target(fullname):
    return 'hvd.' + fullname[len(_PREFIX):]


class _HvdAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds horovod.X as hvd.X and hands back hvd's module object."""

    def __init__(self):
        self._real_specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX):
            return None
        try:
            real = importlib.util.find_spec(_target(fullname))
        except ModuleNotFoundError:
            return None
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, self,
                                               is_package=real.submodule_search_locations is not None)

    def create_module(self, spec):
        module = importlib.import_module(_target(spec.name))
        # importlib writes the alias's spec onto the module next; keep hvd's.
        self._real_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        name = module.__spec__.name
        if name in self._real_specs:
            module.__spec__ = self._real_specs.pop(name)


if not any(type(f).__name__ == '_HvdAlias' for f in sys.meta_path):
    sys.meta_path.insert(0, _HvdAlias())


def __getattr__(name):
    try:
        return getattr(_hvd, name)
    except AttributeError:
        pass
    raise AttributeError("module 'horovod' has no attribute %r: this horovod is hvd %s (hvdgen plugin install "
                         "--provide-horovod), and hvd has no hvd.%s" % (name, __version__, name))
