"""Compression for hvd.numpy's allreduce and reducescatter (Horovod's
Compression.none and Compression.fp16, on numpy arrays)."""
import numpy as np

from hvd.common import compression


class Compressor(compression.NoneCompressor):
    """Compresses an array before an allreduce and restores it after (this
    base passes it through)."""


class NoneCompressor(Compressor):
    """No compression."""


class FP16Compressor(Compressor):
    """Casts floating arrays to float16 for the reduction and back after."""

    @staticmethod
    def compress(tensor):
        tensor = np.asarray(tensor)
        if tensor.dtype.kind == 'f' and tensor.dtype != np.float16:
            return tensor.astype(np.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class Compression:
    """Horovod's Compression choices: Compression.none, Compression.fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor
