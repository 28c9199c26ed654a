"""Exceptions, as horovod.common.exceptions defines them, and the library's
error codes they carry."""
from hvd.common import _abi

# The library's error codes by name (INVALID_ARGUMENT, MISMATCH, SHUTDOWN, ...:
# codegen/abi/hvd.go): every exception a library call raises carries its code
# as hvd_code, and code outside hvd.common tells failures apart by them.
CODES = {name: code for code, (name, _) in _abi.ERRORS.items()}


class HorovodInternalError(RuntimeError):
    """A collective failed while it ran: ranks disagreed on its shape, dtype
    or parameters, a peer died, or hvd was shut down. Raised by
    synchronize(); elastic training restores state and resets on it."""


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed during elastic training."""

    def __init__(self, skip_sync):
        super().__init__('hosts updated')
        self.skip_sync = skip_sync
