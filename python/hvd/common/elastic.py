"""Elastic training, the framework-independent part (horovod.common.elastic):
State, ObjectState and run_fn, the loop behind ``@hvd.elastic.run``.

The worker side of docs/elastic.md: hvd.init() in an elastic worker joins the
world hvdrun's driver assigns; run_fn syncs the state from rank 0, calls the
training function, and on HorovodInternalError restores the last commit, on
HostsUpdatedInterrupt keeps the state, then resets (shutdown, init: the next
world) and goes on. The ProcessSet objects held by the program stay valid
through a reset: their ids are kept and their ranks updated, or they are
unregistered with a warning when their ranks no longer exist.
"""
import copy
import functools
import sys

from hvd.common import _abi, basics, process_sets, state
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


class HostUpdateResult:
    """Horovod's HostUpdateResult flags (elastic/hosts_updated)."""
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class State:
    """State of a training job kept identical on every rank (Horovod's
    hvd.elastic.State): save() snapshots it, restore() goes back to the
    snapshot, sync() makes every rank hold rank 0's, reset() adapts it to a
    new world. commit() = save() + check_host_updates()."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        self._committed = False

    def register_reset_callbacks(self, callbacks):
        """Functions called (in order) after every reset, once the new world
        is up: rescale the learning rate, rebuild data loaders, ..."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (the point a failure goes back to) and checks for
        host updates (may raise HostsUpdatedInterrupt on every rank)."""
        self.save()
        self._committed = True
        self.check_host_updates()

    def check_host_updates(self):
        """Collective: rank 0 reads the driver's host updates and tells every
        rank; raises HostsUpdatedInterrupt on every rank when the hosts
        changed (skip_sync when they were only removed)."""
        flags = state.lib().elastic_check_host_updates()
        if flags != HostUpdateResult.no_update:
            raise HostsUpdatedInterrupt(flags == HostUpdateResult.removed)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        raise NotImplementedError()


class ObjectState(State):
    """State of picklable attributes, as Horovod's ObjectState: keyword
    arguments become attributes; save() deep-copies them, restore() sets them
    back, sync() broadcasts rank 0's saved copy with bcast_object."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def reset(self):
        pass

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


def is_removed(error):
    """Whether error is hvd.init()'s "this worker was removed from the
    elastic job" (the worker should exit 0)."""
    return getattr(error, 'hvd_code', None) == _abi.E_REMOVED


def reset():
    """Leaves the current world and joins the next one (hvd.shutdown(),
    hvd.init()); the ProcessSet objects held are mapped onto it."""
    held = process_sets.held()
    basics.shutdown()
    basics.init()
    process_sets.remap(held)


def _why(error):
    """error's message for a line that starts with 'hvd: elastic: ': without
    its own 'hvd: ' prefix (the library's messages carry one)."""
    msg = str(error)
    return msg[len('hvd: '):] if msg.startswith('hvd: ') else msg


def run_fn(func, reset_fn=reset):
    """The loop of ``@hvd.elastic.run`` (Horovod's run_fn). func(state, ...)
    must not run a collective before it is called (the ranks that just
    joined would wait for it). Returns func's result; a worker the driver
    removes exits 0 (SystemExit)."""

    @functools.wraps(func)
    def wrapper(state_, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                # Every rank agrees first: a rank that just joined always
                # syncs, so the survivors do too (Horovod's issue 3494).
                if state.lib().elastic_want_sync(skip_sync):
                    state_.sync()
                    state_.save()
                return func(state_, *args, **kwargs)
            except HorovodInternalError as e:
                if getattr(state_, '_committed', True):
                    sys.stderr.write('hvd: elastic: %s: restoring the last commit and resetting\n' % _why(e))
                else:
                    sys.stderr.write('hvd: elastic: %s: no state.commit() was made yet, so the state goes back to '
                                     'where this world started (synced from rank 0; in the first world, the initial '
                                     'state): progress since is lost; call state.commit() regularly\n' % _why(e))
                state_.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            try:
                reset_fn()
            except RuntimeError as e:
                if is_removed(e):
                    sys.stderr.write('%s\n' % e)
                    raise SystemExit(0)
                raise
            state_.on_reset()

    return wrapper
