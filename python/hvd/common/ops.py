"""Reduction ops with Horovod's values, their checks, and Horovod's
handling of the old `average` argument; shared by every framework module."""

import warnings

from hvd.common import _abi, state
from hvd.common.process_sets import set_id

Average = _abi.REDUCE_OP_AVERAGE
Sum = _abi.REDUCE_OP_SUM
Adasum = _abi.REDUCE_OP_ADASUM
Min = _abi.REDUCE_OP_MIN
Max = _abi.REDUCE_OP_MAX
Product = _abi.REDUCE_OP_PRODUCT


REDUCE_OPS = (Average, Sum, Adasum, Min, Max, Product)

_OP_NAMES = {Average: 'Average', Sum: 'Sum', Adasum: 'Adasum', Min: 'Min', Max: 'Max', Product: 'Product'}


def op_name(op):
    """hvd.Sum etc. by name, for messages (the values are plain ints)."""
    if isinstance(op, int) and not isinstance(op, bool) and op in _OP_NAMES:
        return 'hvd.' + _OP_NAMES[op]
    return repr(op)


def handle_average_backwards_compatibility(op, average):
    """The op to use from Horovod's op and deprecated average arguments
    (Average when neither is given)."""
    if op is not None:
        if average is not None:
            raise ValueError('The op parameter supersedes average. Please provide only one of them.')
        return op
    elif average is not None:
        warnings.warn('Parameter `average` has been replaced with `op` and will be removed in v1.0',
                      DeprecationWarning)
        return Average if average else Sum
    return Average


def check_adasum(process_set_id, size):
    """Horovod's rules for op=Adasum (torch/mpi_ops.py): the global process
    set only, and (on CPU) a power-of-two number of ranks; NotImplementedError
    otherwise."""
    if process_set_id != 0:
        raise NotImplementedError('Adasum does not support non-global process sets yet.')
    if size & (size - 1) != 0:
        raise NotImplementedError('Running Adasum with non-power of 2 ranks is not supported yet '
                                  '(hvd.size() is %d).' % size)


def check_op(op, process_set):
    """ValueError for anything but one of the reduce ops (a bool is not an
    op); for Adasum, Horovod's rules (check_adasum)."""
    if isinstance(op, bool) or op not in REDUCE_OPS:
        raise ValueError('unknown reduce op %r: use hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max or hvd.Product'
                         % (op,))
    if op == Adasum:
        check_adasum(set_id(process_set), state.size())


def check_scatter_op(op):
    """Reducescatter takes Average or Sum: NotImplementedError for Adasum,
    ValueError for anything else (a bool included)."""
    if op == Adasum:
        raise NotImplementedError('Reducescatter does not support Adasum; use op=hvd.Average or hvd.Sum')
    if isinstance(op, bool) or op not in (Average, Sum):
        raise ValueError('Reducescatter only supports AVERAGE and SUM ops, not %s' % op_name(op))
