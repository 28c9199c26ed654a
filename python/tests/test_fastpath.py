"""hvd.torch's per-op fast path (hvd/common/_fastpath.c, issue 27) against
the general path, under hvdrun on every rank: the same results, the same
errors, and the cases it must hand to the general path. With
HVD_TEST_FASTPATH=required (e2e sets it when it built the extension) the C
module must be loaded; otherwise the Python fast path is tested alone."""
import os
import time
import warnings

import pytest
import torch

import hvd.torch as hvd
from hvd.common import _abi, handles
from hvd.common.handles import synchronize_many
from hvd.torch import mpi_ops, tensors

R, N = hvd.rank(), hvd.size()

# The functions hvd.torch binds to their C forms when the C path is built
# (a callable without a Python frame, falling back to the Python function).
ENTRIES = ('allreduce_async_', 'allreduce_', 'synchronize')


def test_the_c_path_is_loaded_when_built():
    if os.environ.get('HVD_TEST_FASTPATH') != 'required':
        pytest.skip('HVD_TEST_FASTPATH=required is not set: the C fast path is not required here')
    assert tensors._fp is not None, 'hvd/common/_fastpath was built but hvd.torch does not use it'
    assert handles._fast is tensors._fp


@pytest.fixture(params=['c', 'python', 'general'])
def path(request, monkeypatch):
    """Runs a test through the C fast path, the Python one, or the general
    path alone (every rank takes the same one)."""
    if request.param == 'c':
        if tensors._fp is None:
            pytest.skip('the C fast path is not built (python3-dev)')
    else:
        monkeypatch.setattr(tensors, '_fp', None)
        monkeypatch.setattr(handles, '_fast', None)
        for name in ENTRIES:  # the Python functions the C forms fall back to
            for mod in (hvd, mpi_ops):
                monkeypatch.setattr(mod, name, getattr(getattr(mod, name), '__wrapped__', getattr(mod, name)))
    if request.param == 'general':
        monkeypatch.setattr(tensors, '_fast_args', lambda *a: None)
    return request.param


def _x(i, dtype=torch.float32, shape=(5, 3)):
    return (torch.arange(15, dtype=torch.float64).reshape(5, 3)[:shape[0], :shape[1]] * (R + 1) + i).to(dtype)


def _expected(i, dtype, op, shape=(5, 3)):
    xs = [(torch.arange(15, dtype=torch.float64).reshape(5, 3)[:shape[0], :shape[1]] * (r + 1) + i) for r in range(N)]
    s = torch.stack(xs)
    want = {hvd.Sum: s.sum(0), hvd.Average: s.mean(0), hvd.Min: s.min(0).values, hvd.Max: s.max(0).values,
            hvd.Product: s.prod(0)}[op]
    return want.to(dtype)


@pytest.mark.parametrize('dtype,op', [(d, op) for d in (torch.float32, torch.float64, torch.int32, torch.int64)
                                       for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, None)
                                       if d.is_floating_point or op not in (hvd.Average, None)])
def test_async_in_place_batch(path, dtype, op):
    # (integer Average truncates: test_torch.py covers it)
    xs = [_x(i, dtype) for i in range(20)]
    hs = [hvd.allreduce_async_(x, op=op, name='fp.%s.%s.%s.%d' % (path, dtype, op, i)) for i, x in enumerate(xs)]
    assert all(type(h) is int for h in hs)
    outs = [hvd.synchronize(h) for h in hs]
    for i, (x, out) in enumerate(zip(xs, outs)):
        assert out is x  # in place: synchronize returns the caller's tensor
        torch.testing.assert_close(out, _expected(i, dtype, hvd.Average if op is None else op))
    assert not any(h in handles.handle_map for h in hs)
    assert hvd.synchronize(hs[0]) is None  # a released handle, as in Horovod


def test_parameter_scales_priority_and_sync_forms(path):
    p = torch.nn.Parameter(_x(0).clone())
    h = hvd.allreduce_async_(p.data, op=hvd.Sum, prescale_factor=2, postscale_factor=0.5, priority=7,
                             name='fp.scales.%s' % path)
    torch.testing.assert_close(hvd.synchronize(h), _expected(0, torch.float32, hvd.Sum))
    q = _x(1)
    assert hvd.allreduce_(q, op=hvd.Max, name='fp.sync.%s' % path) is q
    torch.testing.assert_close(q, _expected(1, torch.float32, hvd.Max))
    # a Parameter itself (not its .data), out of place (a new tensor)
    with torch.no_grad():
        w = torch.nn.Parameter(_x(2))
        out = hvd.synchronize(hvd.allreduce_async(w, op=hvd.Sum, name='fp.param.%s' % path))
    assert out is not w
    torch.testing.assert_close(out, _expected(2, torch.float32, hvd.Sum))
    # an unnamed op and a bool-free priority range
    z = _x(3)
    torch.testing.assert_close(hvd.synchronize(hvd.allreduce_async_(z, op=hvd.Sum, priority=-(1 << 31))),
                               _expected(3, torch.float32, hvd.Sum))


def test_cases_the_general_path_handles(path, even_set):
    # not contiguous: the result is copied back into the caller's view
    base = _x(0, shape=(5, 3)).t()
    assert not base.is_contiguous()
    out = hvd.synchronize(hvd.allreduce_async_(base, op=hvd.Sum, name='fp.noncontig.%s' % path))
    assert out is base
    torch.testing.assert_close(out, _expected(0, torch.float32, hvd.Sum).t())

    class Sub(torch.Tensor):
        pass

    s = _x(1).as_subclass(Sub)
    torch.testing.assert_close(hvd.synchronize(hvd.allreduce_async_(s, op=hvd.Sum, name='fp.sub.%s' % path)),
                               _expected(1, torch.float32, hvd.Sum).as_subclass(Sub))
    # the deprecated average= argument
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        a = _x(2)
        torch.testing.assert_close(hvd.synchronize(hvd.allreduce_async_(a, average=False, name='fp.avg.%s' % path)),
                                   _expected(2, torch.float32, hvd.Sum))
    # numpy scale factors
    import numpy as np
    b = _x(3)
    torch.testing.assert_close(
        hvd.synchronize(hvd.allreduce_async_(b, op=hvd.Sum, postscale_factor=np.float64(1.0), name='fp.np.%s' % path)),
        _expected(3, torch.float32, hvd.Sum))
    # a process set that excludes ranks
    if even_set.ranks and len(even_set.ranks) < N:
        c = torch.full((4,), float(R + 1))
        if R in even_set.ranks:
            hvd.synchronize(hvd.allreduce_async_(c, op=hvd.Sum, process_set=even_set, name='fp.even.%s' % path))
            assert c.tolist() == [float(sum(r + 1 for r in even_set.ranks))] * 4
        else:
            with pytest.raises(ValueError, match='not a member|not in'):
                hvd.allreduce_async_(c, op=hvd.Sum, process_set=even_set, name='fp.even.%s' % path)


def test_bad_arguments_raise_as_before(path):
    x = _x(0)
    with pytest.raises(ValueError, match='unknown reduce op'):
        hvd.allreduce_async_(x, op=True, name='fp.bad.op')
    with pytest.raises(ValueError, match='unknown reduce op'):
        hvd.allreduce_async_(x, op=99, name='fp.bad.op')
    with pytest.raises(ValueError, match='priority'):
        hvd.allreduce_async_(x, priority=1 << 31, name='fp.bad.prio')
    with pytest.raises(ValueError, match='priority'):
        hvd.allreduce_async_(x, priority=True, name='fp.bad.prio')
    with pytest.raises(TypeError, match='torch.Tensor'):
        hvd.allreduce_async_([1.0, 2.0], name='fp.bad.type')
    with pytest.raises(ValueError, match='not supported'):
        hvd.allreduce_async_(torch.zeros(2, dtype=torch.complex64), name='fp.bad.dtype')
    with pytest.raises(ValueError, match='op parameter supersedes average'):
        hvd.allreduce_async_(x, average=True, op=hvd.Sum, name='fp.bad.both')
    with pytest.raises(ValueError, match='process_set'):
        hvd.allreduce_async_(x, process_set='global', name='fp.bad.set')
    with pytest.raises(ValueError, match='not been registered|does not exist'):
        hvd.allreduce_async_(x, process_set=hvd.ProcessSet([0]), name='fp.bad.unregistered')
    # a name already in flight: the library's own error, raised as the ctypes
    # path raises it. Rank 0 tries while the op cannot have completed (the
    # others enqueue it only after the barrier).
    if R == 0:
        h = hvd.allreduce_async_(_x(1), op=hvd.Sum, name='fp.dup.%s' % path)
        with pytest.raises(ValueError, match='fp.dup'):
            hvd.allreduce_async_(_x(1), op=hvd.Sum, name='fp.dup.%s' % path)
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async_(_x(1), op=hvd.Sum, name='fp.dup.%s' % path)
    torch.testing.assert_close(hvd.synchronize(h), _expected(1, torch.float32, hvd.Sum))


def test_failed_op_raises_from_synchronize_and_releases(path):
    # shapes differ across ranks: every rank's synchronize raises the engine's error
    x = torch.ones(3 + R)
    h = hvd.allreduce_async_(x, op=hvd.Sum, name='fp.mismatch.%s' % path)
    with pytest.raises(hvd.HorovodInternalError, match='shape'):
        hvd.synchronize(h)
    assert h not in handles.handle_map
    assert hvd.synchronize(h) is None
    # the engine goes on
    y = _x(0)
    torch.testing.assert_close(hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum, name='fp.after.%s' % path)),
                               _expected(0, torch.float32, hvd.Sum))


def _wait_all(hs):
    """Until every op completed (poll asks the library; it never blocks)."""
    for h in hs:
        while not hvd.poll(h):
            time.sleep(0.001)


def test_synchronize_reaps_the_finished_ops_of_a_batch(path):
    """The C path's synchronize of one in-place op releases, in the same
    library call, every other op of the batch that has finished; their
    synchronize then makes no call. Other paths reap nothing."""
    xs = [_x(i) for i in range(30)]
    hs = [hvd.allreduce_async_(x, op=hvd.Sum, name='fp.reap.%s.%d' % (path, i)) for i, x in enumerate(xs)]
    _wait_all(hs)
    assert hvd.synchronize(hs[0]) is xs[0]
    if path == 'c':
        assert set(hs[1:]) <= handles.reaped
        with pytest.raises(ValueError, match='unknown handle|already released'):
            _abi.poll(hs[1])  # gone from the library already
    else:
        assert not set(hs) & handles.reaped
    assert all(hvd.poll(h) for h in hs[1:])
    # reaped handles through each way of synchronizing
    outs = [hvd.synchronize(h) for h in hs[1:10]] + synchronize_many(hs[10:])
    for i, (x, out) in enumerate(zip(xs[1:], outs), 1):
        assert out is x
        torch.testing.assert_close(out, _expected(i, torch.float32, hvd.Sum))
    assert not set(hs) & handles.reaped
    assert not any(h in handles.handle_map for h in hs)
    assert hvd.synchronize(hs[5]) is None


def test_reaping_keeps_failed_ops_and_ops_synchronized_elsewhere(path):
    """A failed op is never reaped: its synchronize raises the engine's
    error. Ops of the C path synchronized by the Python path meanwhile
    (synchronize_many) leave the C path's candidates cleanly."""
    ok0, bad, ok2 = _x(0), torch.ones(3 + R), _x(2)
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name='fp.reapfail.%s.%d' % (path, i))
          for i, t in enumerate((ok0, bad, ok2))]
    others = [_x(i) for i in range(3, 8)]
    hs2 = [hvd.allreduce_async_(t, op=hvd.Sum, name='fp.reapmix.%s.%d' % (path, i)) for i, t in enumerate(others)]
    _wait_all(hs + hs2)
    assert all(a is b for a, b in zip(synchronize_many(hs2[:2]), others[:2]))
    torch.testing.assert_close(hvd.synchronize(hs[0]), _expected(0, torch.float32, hvd.Sum))
    assert hs[1] not in handles.reaped
    with pytest.raises(hvd.HorovodInternalError, match='shape'):
        hvd.synchronize(hs[1])
    assert hvd.synchronize(hs[1]) is None
    torch.testing.assert_close(hvd.synchronize(hs[2]), _expected(2, torch.float32, hvd.Sum))
    for i, (t, h) in enumerate(zip(others[2:], hs2[2:]), 5):
        assert hvd.synchronize(h) is t
        torch.testing.assert_close(t, _expected(i, torch.float32, hvd.Sum))
    assert not set(hs + hs2) & (handles.reaped | set(handles.handle_map))


def test_result_function_that_raises_still_releases(path):
    """synchronize pops and releases the handle when the op's result
    function raises (a generated framework module's conversion)."""
    x = _x(0)
    h = hvd.allreduce_async(x, op=hvd.Sum, name='fp.raise.%s' % path)

    def boom():
        raise KeyError('conversion failed')

    handles.handle_map[h] = (handles.handle_map[h][0], boom)
    with pytest.raises(KeyError, match='conversion failed'):
        hvd.synchronize(h)
    assert h not in handles.handle_map
    assert hvd.synchronize(h) is None


@pytest.mark.parametrize('dtype,op', [(torch.float32, hvd.Sum), (torch.float64, None), (torch.int64, hvd.Max),
                                      (torch.float32, hvd.Min)])
def test_out_of_place_sync_allreduce(path, dtype, op, monkeypatch):
    """hvd.allreduce (a new tensor): the C path makes it one call into a
    fresh tensor; the caller's tensor is untouched, and the general path
    is not entered for a plain CPU tensor (it is for the other paths)."""
    general = []
    real = tensors.Collectives._allreduce_sync

    def spy(self, tensor, in_place, *a, **kw):
        general.append(in_place)
        return real(self, tensor, in_place, *a, **kw)

    monkeypatch.setattr(tensors.Collectives, '_allreduce_sync', spy)
    want_op = hvd.Average if op is None else op
    x = _x(0, dtype)
    before = x.clone()
    out = hvd.allreduce(x, op=op, name='fp.oop.%s.%s.%s' % (path, dtype, op))
    assert out is not x and out.data_ptr() != x.data_ptr()
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    torch.testing.assert_close(out, _expected(0, dtype, want_op))
    assert torch.equal(x, before)
    # a Parameter in, a plain tensor out; unnamed, scaled
    p = torch.nn.Parameter(_x(1).clone(), requires_grad=False)
    q = hvd.allreduce(p, op=hvd.Sum, prescale_factor=2, postscale_factor=0.5)
    assert type(q) is torch.Tensor
    torch.testing.assert_close(q, _expected(1, torch.float32, hvd.Sum))
    # empty, and a view that is not contiguous (the general path's copy)
    assert hvd.allreduce(torch.zeros(0, 3, dtype=dtype), op=hvd.Sum, name='fp.oop.empty.%s' % path).shape == (0, 3)
    t = _x(2).t()
    torch.testing.assert_close(hvd.allreduce(t, op=hvd.Sum, name='fp.oop.t.%s' % path),
                               _expected(2, torch.float32, hvd.Sum).t())
    if path == 'c':
        assert general == [False], general  # the transposed view alone took the general path
    else:
        assert len(general) == 4 and not any(general), general


def test_out_of_place_sync_allreduce_errors(path, even_set):
    # shapes differ across ranks: the same error on every path; the engine goes on
    with pytest.raises(hvd.HorovodInternalError, match='shape'):
        hvd.allreduce(torch.ones(3 + R), op=hvd.Sum, name='fp.oop.mismatch.%s' % path)
    torch.testing.assert_close(hvd.allreduce(_x(0), op=hvd.Sum, name='fp.oop.after.%s' % path),
                               _expected(0, torch.float32, hvd.Sum))
    # a set that excludes this rank: refused before any round, as before
    if even_set.ranks and R not in even_set.ranks:
        with pytest.raises(ValueError, match='not a member|not in'):
            hvd.allreduce(_x(1), op=hvd.Sum, process_set=even_set, name='fp.oop.foreign.%s' % path)


@pytest.mark.parametrize('call', ['allreduce_', 'allreduce', 'allreduce_async_', 'synchronize'])
def test_a_forked_child_raises_instead_of_hanging(path, call):
    """In a child forked from an initialized process (a DataLoader worker)
    every path raises: the C path hands over to the general one, whose
    library stand-in raises (the Go runtime did not survive the fork; a
    call into it hung)."""
    h = hvd.allreduce_async_(_x(0), op=hvd.Sum, name='fp.fork.%s.%s' % (path, call)) if call == 'synchronize' else None
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only for the expected error, whatever happens
        code = 3
        try:
            x = torch.ones(4)
            if call == 'synchronize':
                hvd.synchronize(h)
            else:
                getattr(hvd, call)(x, op=hvd.Sum, name='fp.fork.child')
            code = 1
        except RuntimeError as e:
            code = 0 if 'forked' in str(e) else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail('the forked child hung in hvd.%s (%s path)' % (call, path))
        time.sleep(0.01)
    if h is not None:
        torch.testing.assert_close(hvd.synchronize(h), _expected(0, torch.float32, hvd.Sum))
    assert os.waitstatus_to_exitcode(status) == 0, \
        'the child exited %d (1: no error, 2: another RuntimeError)' % os.waitstatus_to_exitcode(status)


def _c_only():
    if tensors._fp is None:
        pytest.skip('the C fast path is not built (python3-dev)')


def test_entries_are_c_forms_of_the_python_functions():
    """hvd.allreduce_async_, allreduce_ and synchronize are the C callables
    (no Python frame per op), with the Python function's name, documentation
    and signature; they pickle by reference as functions do."""
    import inspect
    import pickle
    import types
    _c_only()
    for name in ENTRIES:
        f = getattr(hvd, name)
        assert f is getattr(mpi_ops, name)
        assert not isinstance(f, types.FunctionType), name
        py = f.__wrapped__
        assert isinstance(py, types.FunctionType)
        assert f.__name__ == name and f.__doc__ == py.__doc__ and f.__module__ == 'hvd.torch.mpi_ops'
        assert inspect.signature(f) == inspect.signature(py)
        assert pickle.loads(pickle.dumps(f)) is f
        assert name in repr(f)


def test_entries_bind_and_are_weakly_referenced_as_functions(monkeypatch):
    """What a function allows and code around Horovod relies on: a weak
    reference (dropped with the entry), and binding as a method (read from
    an instance, the entry receives the instance as its first argument;
    read from the class, it is itself)."""
    import gc
    import inspect
    import types
    import weakref
    _c_only()
    for name in ENTRIES:
        f = getattr(hvd, name)
        assert weakref.ref(f)() is f
    calls = []

    def fallback(*args, **kwargs):
        calls.append((args, kwargs))
        return 'fallback'

    e = tensors._fp.entry('allreduce_async_', fallback, hvd.global_process_set, fallback)
    dropped = []
    r = weakref.ref(e, lambda _: dropped.append(True))

    class Holder:
        f = e

    assert Holder.f is e
    h = Holder()
    assert inspect.ismethod(h.f) and h.f.__self__ is h and h.f.__func__ is e
    assert h.f(name='x') == 'fallback' and calls == [((h,), {'name': 'x'})]
    del Holder, h, e, calls[:]
    gc.collect()
    assert r() is None and dropped == [True]

    # bound to a plain tensor: the C path (no Python code behind it runs),
    # the tensor as the first argument
    seen = []
    coll = type(tensors.collectives)
    for meth in ('allreduce_async_', 'allreduce_'):
        def spy(self, *a, _real=getattr(coll, meth), _m=meth, **kw):
            seen.append(_m)
            return _real(self, *a, **kw)
        monkeypatch.setattr(coll, meth, spy)
    x = _x(10)
    assert types.MethodType(hvd.allreduce_, x)(op=hvd.Sum, name='fp.entry.bound.plain') is x
    torch.testing.assert_close(x, _expected(10, torch.float32, hvd.Sum))
    x = _x(11)
    assert hvd.synchronize(types.MethodType(hvd.allreduce_async_, x)(None, 'fp.entry.bound.plain.async', hvd.Max)) is x
    torch.testing.assert_close(x, _expected(11, torch.float32, hvd.Max))
    assert seen == []

    # bound to a subclass instance (the Python function then runs: the C
    # path takes plain tensors and Parameters only)
    class Grad(torch.Tensor):
        reduce_ = hvd.allreduce_
        reduce_async_ = hvd.allreduce_async_

    g = _x(8).as_subclass(Grad)
    assert g.reduce_(op=hvd.Max, name='fp.entry.bound') is g
    torch.testing.assert_close(g.as_subclass(torch.Tensor), _expected(8, torch.float32, hvd.Max))
    g = _x(9).as_subclass(Grad)
    assert hvd.synchronize(g.reduce_async_(op=hvd.Sum, name='fp.entry.bound.async')) is g
    torch.testing.assert_close(g.as_subclass(torch.Tensor), _expected(9, torch.float32, hvd.Sum))
    assert seen == ['allreduce_', 'allreduce_async_']


def test_entries_take_horovods_argument_forms():
    """Every way of passing Horovod's arguments gives the same result;
    what the signature refuses raises the Python function's TypeError."""
    _c_only()
    forms = [
        lambda x, n: hvd.allreduce_async_(x, None, n, hvd.Sum, 1.0, 1.0, hvd.global_process_set, 0),
        lambda x, n: hvd.allreduce_async_(x, priority=3, process_set=hvd.global_process_set, postscale_factor=1,
                                          prescale_factor=1, op=hvd.Sum, name=n, average=None),
        lambda x, n: hvd.allreduce_async_(tensor=x, name=n, op=hvd.Sum),
        lambda x, n: hvd.allreduce_async_(x, None, n, op=hvd.Sum),
    ]
    for i, form in enumerate(forms):
        x = _x(i)
        out = hvd.synchronize(form(x, 'fp.entry.form.%d' % i))
        assert out is x
        torch.testing.assert_close(out, _expected(i, torch.float32, hvd.Sum))
    y = _x(5)
    assert hvd.allreduce_(y, None, 'fp.entry.sync', hvd.Max) is y
    torch.testing.assert_close(y, _expected(5, torch.float32, hvd.Max))
    z = _x(6)
    assert hvd.allreduce_(tensor=z, op=hvd.Sum) is z  # unnamed
    torch.testing.assert_close(z, _expected(6, torch.float32, hvd.Sum))
    x = _x(7)
    with pytest.raises(TypeError, match='unexpected keyword'):
        hvd.allreduce_async_(x, nme='fp.entry.typo')
    with pytest.raises(TypeError, match='multiple values'):
        hvd.allreduce_async_(x, None, 'fp.entry.twice', name='fp.entry.twice')
    with pytest.raises(TypeError, match='positional argument'):
        hvd.allreduce_async_(x, None, 'fp.entry.many', hvd.Sum, 1.0, 1.0, hvd.global_process_set, 0, 'extra')
    with pytest.raises(TypeError, match='tensor'):
        hvd.allreduce_async_(name='fp.entry.none')
    with pytest.raises(TypeError, match='tensor'):
        hvd.allreduce_()
    with pytest.raises(TypeError):
        hvd.synchronize()
    with pytest.raises(TypeError):
        hvd.synchronize(1, 2)
    assert hvd.synchronize(handle=-12345) is None  # by keyword: the Python function, an unknown handle
    # nothing was enqueued by the refused calls: a batch still completes
    hs = [hvd.allreduce_async_(_x(i), op=hvd.Sum, name='fp.entry.after.%d' % i) for i in range(3)]
    for i, h in enumerate(hs):
        torch.testing.assert_close(hvd.synchronize(h), _expected(i, torch.float32, hvd.Sum))


def test_entries_hand_only_other_cases_to_the_python_functions(monkeypatch):
    """A plain contiguous CPU tensor never reaches the Python code behind
    the C forms; a view that is not contiguous does, with the caller's
    arguments as given; a refused op raises the library's error."""
    _c_only()
    seen = []
    real_async, real_sync = type(tensors.collectives).allreduce_async_, type(tensors.collectives).allreduce_

    def spy_async(self, tensor, *a, **kw):
        seen.append(('async', a))
        return real_async(self, tensor, *a, **kw)

    def spy_sync(self, tensor, *a, **kw):
        seen.append(('sync', a))
        return real_sync(self, tensor, *a, **kw)

    monkeypatch.setattr(type(tensors.collectives), 'allreduce_async_', spy_async)
    monkeypatch.setattr(type(tensors.collectives), 'allreduce_', spy_sync)
    x, y = _x(0), _x(1)
    hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Sum, name='fp.entry.plain'))
    hvd.allreduce_(y, op=hvd.Sum, name='fp.entry.plain.sync')
    assert seen == []
    torch.testing.assert_close(x, _expected(0, torch.float32, hvd.Sum))
    torch.testing.assert_close(y, _expected(1, torch.float32, hvd.Sum))
    t = _x(2).t()
    out = hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Min, prescale_factor=2, name='fp.entry.view'))
    assert out is t
    torch.testing.assert_close(out, (_expected(2, torch.float64, hvd.Min) * 2).float().t())
    assert [k for k, _ in seen] == ['async']
    assert seen[0][1][:4] == (None, 'fp.entry.view', hvd.Min, 2)
    # the library refuses a name in flight: raised as the Python path raises it
    if R == 0:
        h = hvd.allreduce_async_(_x(3), op=hvd.Sum, name='fp.entry.dup')
        with pytest.raises(ValueError, match='fp.entry.dup'):
            hvd.allreduce_async_(_x(3), op=hvd.Sum, name='fp.entry.dup')
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async_(_x(3), op=hvd.Sum, name='fp.entry.dup')
    torch.testing.assert_close(hvd.synchronize(h), _expected(3, torch.float32, hvd.Sum))
    assert [k for k, _ in seen] == ['async']


def test_the_tensor_reader_is_used_when_built(monkeypatch):
    """With HVD_TEST_FASTPATH=required (e2e builds hvd/torch/_tensorinfo.cpp
    too) the C path reads tensors through it; it is refused when turned
    off or when torch is not the version it was compiled against."""
    if os.environ.get('HVD_TEST_FASTPATH') != 'required':
        pytest.skip('HVD_TEST_FASTPATH=required is not set: the tensor reader is not required here')
    assert tensors._fp is not None and tensors._fp.has_reader(), 'hvd/torch/_tensorinfo was built but is not used'
    assert tensors._tensor_info() is not None
    monkeypatch.setenv('HVD_PY_TENSORINFO', '0')
    assert tensors._tensor_info() is None
    monkeypatch.delenv('HVD_PY_TENSORINFO')
    monkeypatch.setattr(tensors.torch, '__version__', '0.1.0')
    assert tensors._tensor_info() is None


def test_the_tensor_reader_agrees_with_the_attributes():
    """hvd/torch/_tensorinfo's answer for each tensor is what its Python
    attributes say: (dtype, shape, address) for a contiguous strided CPU
    tensor, nothing for anything else."""
    try:
        from hvd.torch import _tensorinfo
    except ImportError:
        if os.environ.get('HVD_TEST_FASTPATH') == 'required':
            raise
        pytest.skip('hvd/torch/_tensorinfo is not built (no torch C++ headers)')
    codes = {}
    for dtype in tensors.DTYPES:
        codes[_tensorinfo.describe(torch.empty(0, dtype=dtype))[0]] = dtype
    assert len(codes) == len(tensors.DTYPES)
    base = torch.arange(60, dtype=torch.float32).reshape(5, 12)
    grown = torch.zeros(2)
    grown.resize_(3, 4)

    class Sub(torch.Tensor):
        pass

    cases = [base, base[2:], base[1:3], base[:, 4:], base.t(), base[:, ::2], base[3], base[3, 5], torch.tensor(7),
             torch.zeros(0), torch.zeros(3, 0, 2), torch.zeros(1, 3).expand(4, 3), grown,
             torch.nn.Parameter(torch.ones(2, 3)), torch.ones(4, requires_grad=True), torch.ones(3).as_subclass(Sub),
             torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last), torch.zeros(2, 3).to_sparse(),
             torch.zeros(3, dtype=torch.complex64), torch.empty(3, device='meta'), torch.zeros(*[1] * 20)]
    cases += [torch.ones(2, 3, dtype=d)[1:] for d in tensors.DTYPES]
    for i, t in enumerate(cases):
        d = _tensorinfo.describe(t)
        plain = t.layout is torch.strided and t.device.type == 'cpu' and t.is_contiguous()
        if not plain:
            assert d is None, (i, d)
            continue
        assert d is not None, i
        st, shape, addr = d
        if t.dtype in tensors.DTYPES:
            assert codes[st] is t.dtype, (i, st, t.dtype)
        assert torch.Size(shape) == t.shape and addr == t.data_ptr(), (i, d, t.shape, t.data_ptr())
    assert _tensorinfo.describe([1, 2]) is None and _tensorinfo.describe(None) is None
    assert _tensorinfo.version() == tensors._torch_release(torch.__version__)


def test_views_with_an_offset_are_reduced_in_place(path):
    """A contiguous view that starts inside its storage: the op reads and
    writes the view's memory only (the address the C path passes includes
    the offset)."""
    base = _x(0).reshape(-1).clone()
    before = base.clone()
    v = base[4:10]
    out = hvd.synchronize(hvd.allreduce_async_(v, op=hvd.Sum, name='fp.offset.%s' % path))
    assert out is v
    torch.testing.assert_close(base[4:10], _expected(0, torch.float32, hvd.Sum).reshape(-1)[4:10])
    assert torch.equal(base[:4], before[:4]) and torch.equal(base[10:], before[10:])
    row = _x(1).clone()
    assert hvd.allreduce_(row[2], op=hvd.Max, name='fp.offset.row.%s' % path) is not None
    torch.testing.assert_close(row[2], _expected(1, torch.float32, hvd.Max)[2])
    torch.testing.assert_close(row[3], _x(1)[3])
