"""Shared setup for the hvd.torch suites, which run on every rank under
hvdrun (bin/hvdrun -np N python3 -m pytest python/tests/test_torch.py).
Every rank runs the same tests in the same order. HVD_TEST_FRAMEWORK picks
the package that initializes (torch, the default, or numpy: test_numpy.py
runs without torch)."""
import importlib
import os
import sys

import pytest

if os.environ.get('HVD_TEST_NO_INIT') != '1':
    hvd = importlib.import_module('hvd.' + os.environ.get('HVD_TEST_FRAMEWORK', 'torch'))

    EVEN = hvd.ProcessSet(range(0, int(os.environ.get('HOROVOD_SIZE', '1')), 2))
    ODD = hvd.ProcessSet(range(1, int(os.environ.get('HOROVOD_SIZE', '1')), 2))
    if os.environ.get('HVD_TEST_DYNAMIC') == '1':
        hvd.init(process_sets='dynamic')  # test_dynamic.py
    else:
        _sets = [s for s in (EVEN, ODD) if s.ranks and len(s.ranks) < int(os.environ.get('HOROVOD_SIZE', '1'))]
        hvd.init(process_sets=_sets)


@pytest.fixture
def even_set():
    return EVEN


@pytest.fixture
def odd_set():
    return ODD
