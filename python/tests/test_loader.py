"""Loading libhvd.so, run as one plain process (no hvdrun):
HVD_TEST_NO_INIT=1 python3 -m pytest python/tests/test_loader.py.
Each case runs in a fresh interpreter."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

ENV = dict(os.environ)
ENV.pop('HVD_LIBRARY', None)
for k in [k for k in ENV if k.startswith('HOROVOD_')]:
    ENV.pop(k)


def run(code, **env):
    e = dict(ENV, **env)
    p = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], env=e, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def lib_path():
    import hvd.common.loader as loader
    return loader.default_path()


def test_single_process_job():
    rc, out = run('''
        import torch, hvd.torch as hvd
        try:
            hvd.rank()
        except ValueError as e:
            print('before init:', e)
        hvd.init()
        print('size', hvd.size(), 'rank', hvd.rank())
        print('sum', hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist())
        hvd.shutdown()
    ''')
    assert rc == 0, out
    assert 'before init: Horovod has not been initialized' in out
    assert 'size 1 rank 0' in out and 'sum [1.0, 1.0, 1.0]' in out


def test_missing_library():
    rc, out = run('import hvd.torch', HVD_LIBRARY='/nonexistent/libhvd.so')
    assert rc != 0 and 'ImportError' in out and 'libhvd.so not found at /nonexistent/libhvd.so' in out


def test_abi_version_mismatch():
    rc, out = run('''
        import hvd.common._abi as abi
        abi.ABI_VERSION = 999
        import hvd.torch
    ''')
    assert rc != 0 and 'but this hvd package expects version 999' in out
    assert re.search(r'implements ABI version \d+ but', out), out


def test_second_go_runtime_refused(tmp_path):
    copy = str(tmp_path / 'libother.so')
    shutil.copy(lib_path(), copy)
    # another Go library first, then hvd
    rc, out = run('''
        import ctypes, sys
        ctypes.CDLL(%r)
        import hvd.torch
    ''' % copy)
    assert rc != 0 and 'another Go runtime is already loaded' in out and copy in out, out
    # hvd first, then a second copy through the loader
    rc, out = run('''
        import hvd.torch
        from hvd.common import loader
        loader.load(%r)
    ''' % copy)
    assert rc != 0 and 'libhvd.so is already loaded from' in out, out


def test_hvd_library_override(tmp_path):
    copy = str(tmp_path / 'libhvd-copy.so')
    shutil.copy(lib_path(), copy)
    rc, out = run('''
        import hvd.torch
        from hvd.common import loader
        print('loaded', loader._loaded[0])
    ''', HVD_LIBRARY=copy)
    assert rc == 0 and 'loaded ' + copy in out, out


def test_fork_child_cannot_call_go():
    rc, out = run('''
        import os, torch, hvd.torch as hvd
        hvd.init()
        pid = os.fork()
        if pid == 0:
            try:
                hvd.allreduce(torch.ones(1))
                os._exit(3)
            except RuntimeError as e:
                ok = 'forked' in str(e) and hvd.rank() == 0 and hvd.size() == 1
                os._exit(0 if ok else 4)
        _, status = os.waitpid(pid, 0)
        print('child', os.waitstatus_to_exitcode(status))
        print('parent', hvd.allreduce(torch.ones(1), op=hvd.Sum).item())
    ''')
    assert rc == 0 and 'child 0' in out and 'parent 1.0' in out, out


def test_bad_launch_environment_is_value_error():
    # A launch environment the library refuses (HOROVOD_SIZE not a number)
    # is the user's error: the code says INVALID_ARGUMENT, Python raises
    # ValueError, not HorovodInternalError.
    rc, out = run('''
        import hvd.numpy as hvd
        from hvd.common.exceptions import HorovodInternalError
        try:
            hvd.init()
        except HorovodInternalError as e:
            print('internal:', e)
        except ValueError as e:
            print('value error, code', e.hvd_code, ':', e)
        ''', HOROVOD_RANK='0', HOROVOD_SIZE='x')
    assert rc == 0, out
    assert 'value error, code 1' in out and 'bad launch environment' in out and 'HOROVOD_SIZE' in out, out


@pytest.mark.parametrize('value,want', [('1', True), ('2', True), (' 1 ', True), ('0', False), ('x', False), (None, False)])
def test_elastic_worker_rule(value, want):
    # One rule for "this is an elastic worker", the library's (a non-zero
    # integer), read in one place (hvd.common.loader).
    env = {} if value is None else {'HOROVOD_ELASTIC': value}
    rc, out = run('''
        from hvd.common import loader
        print('elastic', loader.elastic_worker())
        ''', **env)
    assert rc == 0 and ('elastic %s' % want) in out, out


def test_backend_built_from_the_registry():
    # The library answers from its backend registry (backends/builtin): the
    # default build has tcp, shm and hier, no nccl; unknown names are 0.
    rc, out = run('''
        import hvd.torch as hvd
        from hvd.common import state
        print('built', [state.lib().backend_built(n) for n in ('tcp', 'shm', 'hier', 'nccl', 'bogus')], hvd.nccl_built())
        ''')
    assert rc == 0 and 'built [1, 1, 1, 0, 0] 0' in out, out
