"""hvd.numpy.mpi_ops: the collectives of hvd.numpy under the module name
Horovod's framework packages use (horovod.<framework>.mpi_ops), with the
private names tests written for Horovod reach into: ``_basics`` (a
HorovodBasics: ``_get_process_set_ids_and_ranks()`` and friends),
``handle_average_backwards_compatibility`` and ``_handle_map``."""
from hvd.common.basics import HorovodBasics as _HorovodBasics
from hvd.common.handles import _handle_map  # noqa: F401
from hvd.common.ops import handle_average_backwards_compatibility  # noqa: F401
from hvd.numpy import *  # noqa: F401,F403
from hvd.numpy import (Adasum, Average, Max, Min, Product, Sum, global_process_set, ProcessSet,  # noqa: F401
                       synchronize, poll)

_basics = _HorovodBasics()
