"""Exceptions, as horovod.common.exceptions defines them."""


class HorovodInternalError(RuntimeError):
    """A collective failed while it ran: ranks disagreed on its shape, dtype
    or parameters, a peer died, or hvd was shut down. Raised by
    synchronize(); elastic training restores state and resets on it."""


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed during elastic training."""

    def __init__(self, skip_sync):
        super().__init__('hosts updated')
        self.skip_sync = skip_sync
