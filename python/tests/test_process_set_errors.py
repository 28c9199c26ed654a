"""Errors of process-set bookkeeping that need no job (run without init,
HVD_TEST_NO_INIT=1, beside test_loader.py)."""
import pytest

from hvd.common import process_sets


def test_unknown_set_at_init_is_a_value_error(monkeypatch):
    # hvd.init(process_sets=[...]) naming a set the running library was not
    # started with: a bad argument (ValueError, as Horovod), not a KeyError.
    monkeypatch.setattr(process_sets.state, 'size', lambda: 4)
    monkeypatch.setattr(process_sets, 'registered', lambda: {0: [0, 1, 2, 3], 1: [0, 1]})
    with pytest.raises(ValueError, match=r'is not registered \(hvd was initialized with other process sets\)'):
        process_sets.init_process_sets([process_sets.ProcessSet([2, 3])])
