"""Reduction ops with Horovod's values, and Horovod's handling of the old
`average` argument; shared by every framework module."""

import warnings

from hvd.common import _abi

Average = _abi.REDUCE_OP_AVERAGE
Sum = _abi.REDUCE_OP_SUM
Adasum = _abi.REDUCE_OP_ADASUM
Min = _abi.REDUCE_OP_MIN
Max = _abi.REDUCE_OP_MAX
Product = _abi.REDUCE_OP_PRODUCT


_OP_NAMES = {Average: 'Average', Sum: 'Sum', Adasum: 'Adasum', Min: 'Min', Max: 'Max', Product: 'Product'}


def op_name(op):
    """hvd.Sum etc. by name, for messages (the values are plain ints)."""
    if isinstance(op, int) and not isinstance(op, bool) and op in _OP_NAMES:
        return 'hvd.' + _OP_NAMES[op]
    return repr(op)


def handle_average_backwards_compatibility(op, average):
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
