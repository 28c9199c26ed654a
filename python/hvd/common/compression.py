"""The compressor interface and the no-op compressor every framework
module's Compression starts from (horovod.*.compression); each framework
adds its own FP16Compressor, which casts with the framework's operations."""


class Compressor:
    """Interface for compressing and decompressing a tensor."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and a context for decompress."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Restores the tensor from its compressed form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
