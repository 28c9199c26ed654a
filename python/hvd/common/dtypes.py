"""The engine's element types (the library's dtype codes), for the
framework modules that map their tensors' dtypes onto them."""
from hvd.common import _abi

UINT8 = _abi.DTYPE_UINT8
INT8 = _abi.DTYPE_INT8
UINT16 = _abi.DTYPE_UINT16
INT16 = _abi.DTYPE_INT16
INT32 = _abi.DTYPE_INT32
INT64 = _abi.DTYPE_INT64
FLOAT16 = _abi.DTYPE_FLOAT16
BFLOAT16 = _abi.DTYPE_BFLOAT16
FLOAT32 = _abi.DTYPE_FLOAT32
FLOAT64 = _abi.DTYPE_FLOAT64
BOOL = _abi.DTYPE_BOOL
