"""Horovod's collectives and hvd's point-to-point ops, once for every
framework.

A framework module describes its tensors with a TensorAdapter (how to check
one, where its memory is, how to allocate and copy one); a Collectives bound
to that adapter does the rest: argument checks, the op, compression and
process-set handling, the call into libhvd.so, the handle and the result in
the framework's type. hvd.torch (tensors.py) and hvd.numpy (arrays.py) each
bind one; the TensorFlow and MXNet modules the plugins generate run on
hvd.numpy's. Framework modules keep only what is theirs: the adapter, their
public signatures and docstrings, and (torch) autograd.

Memory: an input the engine can read in place (the adapter's contiguous())
is handed over by address; the engine writes allreduce outputs into a
tensor allocated here and in-place results into the caller's tensor (via a
contiguous copy, copied back, when the caller's is not contiguous).
Allgather, alltoall and reducescatter outputs, whose shapes only
negotiation knows, are copied once out of the engine. Every tensor an op
uses stays referenced (handles.track) until synchronize returns.

Checks run in one order for every framework: op and the deprecated average
are reconciled first (Horovod's rule), then the tensor(s), then splits, root
rank, peer and tag, then the reduce op, then the scale factors and the
process set.
"""
import ctypes
import numbers
import pickle

from hvd.common import _abi, state
from hvd.common.handles import check, errbuf, synchronize, track
from hvd.common.ops import check_op, check_scatter_op, handle_average_backwards_compatibility
from hvd.common.process_sets import global_process_set, set_id


# Shapes as the library takes them (int64 arrays), by shape: a training
# loop allreduces the same few shapes over and over. The library copies
# them during the call, so one array serves every call and thread.
_shape_arrays = {}


def _shape_array(shape):
    key = tuple(shape)
    a = _shape_arrays.get(key)
    if a is None:
        if len(_shape_arrays) >= 4096:
            _shape_arrays.clear()
        a = _shape_arrays[key] = (ctypes.c_int64 * len(key))(*key)
    return a


def call_allreduce(sync, ptr, out, dtype, shape, op, prescale, postscale, process_set, name, priority):
    """_abi.allreduce (sync) or _abi.allreduce_async, without their per-call
    allocations (the shape array is cached, the error buffer reused: see
    handles.py); same arguments, results and errors."""
    err = errbuf()
    f = _abi.library().hvd_allreduce if sync else _abi.library().hvd_allreduce_async
    return check(f(ptr, out, dtype, _shape_array(shape), len(shape), op, prescale, postscale, process_set,
                   (name or '').encode('utf-8'), priority, err, _abi.ERR_LEN), err)


def _many_arrays(ptrs, dtypes, ndims, shapes, name_lens, prios):
    """The ctypes arrays of allreduce_many_async's arguments."""
    n = len(ptrs)
    return ((ctypes.c_void_p * n)(*ptrs), (ctypes.c_int32 * n)(*dtypes), (ctypes.c_int32 * n)(*ndims),
            (ctypes.c_int64 * len(shapes))(*shapes), (ctypes.c_int32 * n)(*name_lens), (ctypes.c_int32 * n)(*prios))


def _copied_back(fw, x, src):
    return lambda: fw.copy_back(x, src)


class TensorAdapter:
    """How the engine sees one framework's tensors. A subclass implements
    every method; ``x`` below is what input() or inplace() returned."""

    noun = 'tensors'  # in "expected a non-empty list of <noun>"
    pickle = pickle  # serializes broadcast_object/allgather_object payloads

    def input(self, tensor, what):
        """Checks a tensor an op reads (what names it in messages) and
        returns the object to use (an adapter may convert array-likes)."""
        raise NotImplementedError

    def inplace(self, tensor, what):
        """Checks a tensor an op writes its result into; returns it."""
        raise NotImplementedError

    def contiguous(self, x):
        """x itself when the engine can use its memory, else a contiguous copy."""
        raise NotImplementedError

    def view(self, x):
        """What point-to-point ops read and write (torch: x detached)."""
        return x

    def address(self, x):
        """The address of x's first element (x contiguous)."""
        raise NotImplementedError

    def dtype_code(self, x):
        """The library's dtype code of x (hvd.common.dtypes)."""
        raise NotImplementedError

    def shape(self, x):
        """x's shape as a list of ints."""
        raise NotImplementedError

    def nbytes(self, x):
        """The size of x's data in bytes."""
        raise NotImplementedError

    def empty_like(self, x):
        """A new contiguous tensor of x's shape and dtype."""
        raise NotImplementedError

    def clone(self, x):
        """A contiguous copy of x."""
        raise NotImplementedError

    def empty(self, shape, like):
        """A new contiguous tensor of this shape and like's dtype."""
        raise NotImplementedError

    def copy_back(self, dst, src):
        """Writes src into dst when they differ (an in-place op ran on a
        contiguous copy); returns dst."""
        raise NotImplementedError

    def splits(self, splits):
        """alltoall's splits as a list of ints (None stays None)."""
        raise NotImplementedError

    def root_rank(self, root_rank):
        """broadcast's root rank as an int."""
        raise NotImplementedError

    def int32_vector(self, values):
        """A 1-D int32 tensor (alltoall's received splits)."""
        raise NotImplementedError

    def size_vector(self, values):
        """A 1-D integer tensor holding the object helpers' payload sizes."""
        raise NotImplementedError

    def bytes_tensor(self, data):
        """A new 1-D uint8 tensor holding data (bytes)."""
        raise NotImplementedError

    def empty_bytes(self, n):
        """A new 1-D uint8 tensor of n elements."""
        raise NotImplementedError

    def to_bytes(self, x):
        """The bytes of a 1-D uint8 tensor."""
        raise NotImplementedError

    def to_list(self, x):
        """The elements of a 1-D integer tensor as Python ints."""
        raise NotImplementedError


def check_peer(peer, what):
    """A point-to-point peer (dst or src) as an int; ValueError otherwise."""
    if isinstance(peer, bool) or not isinstance(peer, numbers.Integral):
        raise ValueError('hvd: %s must be a global rank (int), not %r' % (what, peer))
    return int(peer)


def check_priority(priority):
    """A collective's priority (a 32-bit signed int; higher goes first among
    tensors ready together) as an int; ValueError otherwise."""
    if type(priority) is int and -(1 << 31) <= priority < 1 << 31:
        return priority  # the common case, fast (it runs for every op)
    if isinstance(priority, bool) or not isinstance(priority, numbers.Integral) or \
            not -(1 << 31) <= priority < 1 << 31:
        raise ValueError('hvd: priority must be an int in -2**31 .. 2**31-1, not %r' % (priority,))
    return int(priority)


def check_tag(tag):
    """A point-to-point tag (0 .. 2**32-1) as an int; ValueError otherwise."""
    if isinstance(tag, bool) or not isinstance(tag, numbers.Integral) or not 0 <= tag < 1 << 32:
        raise ValueError('hvd: tag must be an int in 0 .. 2**32-1, not %r' % (tag,))
    return int(tag)


def join(device=-1):
    """Declares that this rank has no more data: until every rank has
    joined, other ranks' allreduces see zeros from it. Blocks until all have
    joined and returns the global rank that joined last."""
    return _abi.join()


def barrier(process_set=global_process_set):
    """Blocks until every member of the process set has called it."""
    _abi.barrier(set_id(process_set))


class Collectives:
    """Horovod's collectives on one framework's tensors (see the module
    docstring). Method names and arguments are Horovod's; *_async methods
    return a handle for handles.poll/synchronize; the others wait. The
    waiting forms that take a compression (allreduce, grouped_allreduce,
    reducescatter, grouped_reducescatter) are the non-differentiable ones
    hvd.numpy exposes; hvd.torch wraps the async forms in autograd instead."""

    def __init__(self, adapter):
        self.fw = adapter

    # ------------------------------------------------------------ helpers

    def _describe(self, x):
        return self.fw.address(x), self.fw.dtype_code(x), self.fw.shape(x)

    def _describe_group(self, xs):
        ptrs, dtypes, ndims, shapes = [], [], [], []
        for x in xs:
            shape = self.fw.shape(x)
            ptrs.append(self.fw.address(x))
            dtypes.append(self.fw.dtype_code(x))
            ndims.append(len(shape))
            shapes.extend(shape)
        return ptrs, dtypes, ndims, shapes

    def _group(self, tensors, in_place=False):
        if not isinstance(tensors, (list, tuple)) or len(tensors) == 0:
            raise ValueError('expected a non-empty list of %s' % self.fw.noun)
        check = self.fw.inplace if in_place else self.fw.input
        return [check(t, 'tensors[%d]' % i) for i, t in enumerate(tensors)]

    def _output(self, handle, index, like):
        """Output index of a completed op, copied out of the engine."""
        out = self.fw.empty(_abi.handle_output_shape(handle, index), like)
        _abi.handle_output_copy(handle, index, self.fw.address(out), self.fw.nbytes(out))
        return out

    # ---------------------------------------------------------- allreduce

    def _allreduce_async(self, tensor, in_place, name, op, prescale_factor, postscale_factor, process_set,
                         priority=0):
        fw = self.fw
        x = fw.inplace(tensor, 'tensor') if in_place else fw.input(tensor, 'tensor')
        check_op(op, process_set)
        priority = check_priority(priority)
        src = fw.contiguous(x)
        out = src if in_place else fw.empty_like(src)
        ptr, dt, shape = self._describe(src)
        handle = call_allreduce(False, ptr, fw.address(out), dt, shape, op, float(prescale_factor),
                                 float(postscale_factor), set_id(process_set), name, priority)
        if in_place:
            return track(handle, (x, src), lambda: fw.copy_back(x, src))
        return track(handle, (x, src, out), lambda: out)

    def _allreduce_sync(self, tensor, in_place, name, op, prescale_factor, postscale_factor, process_set,
                        priority=0):
        """The waiting allreduce in one library call, without a handle: the
        calling thread runs the round itself when the engine is idle (no
        wake-up by the engine's thread; issue 18). Errors as synchronize's."""
        fw = self.fw
        x = fw.inplace(tensor, 'tensor') if in_place else fw.input(tensor, 'tensor')
        check_op(op, process_set)
        priority = check_priority(priority)
        src = fw.contiguous(x)
        out = src if in_place else fw.empty_like(src)
        ptr, dt, shape = self._describe(src)
        call_allreduce(True, ptr, fw.address(out), dt, shape, op, float(prescale_factor), float(postscale_factor),
                        set_id(process_set), name, priority)
        return fw.copy_back(x, src) if in_place else out

    def allreduce_async(self, tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set, priority=0):
        op = handle_average_backwards_compatibility(op, average)
        return self._allreduce_async(tensor, False, name, op, prescale_factor, postscale_factor, process_set,
                                     priority)

    def allreduce_async_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0, process_set=global_process_set, priority=0):
        op = handle_average_backwards_compatibility(op, average)
        return self._allreduce_async(tensor, True, name, op, prescale_factor, postscale_factor, process_set,
                                     priority)

    def allreduce_sync(self, tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, priority=0):
        """allreduce_async then synchronize, in one library call (a new output)."""
        op = handle_average_backwards_compatibility(op, average)
        return self._allreduce_sync(tensor, False, name, op, prescale_factor, postscale_factor, process_set,
                                    priority)

    def allreduce(self, tensor, average, name, compression, op, prescale_factor, postscale_factor, process_set,
                  priority=0):
        compressed, ctx = compression.compress(self.fw.input(tensor, 'tensor'))
        out = self.allreduce_sync(compressed, average, name, op, prescale_factor, postscale_factor, process_set,
                                  priority)
        return compression.decompress(out, ctx)

    def allreduce_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                   process_set=global_process_set, priority=0):
        op = handle_average_backwards_compatibility(op, average)
        return self._allreduce_sync(tensor, True, name, op, prescale_factor, postscale_factor, process_set,
                                    priority)

    def allreduce_many_async_(self, tensors, names, priorities, op, prescale_factor=1.0, postscale_factor=1.0,
                              process_set=global_process_set, drive=False):
        """In-place allreduce_async_ of each tensor, with its own name (None:
        automatic) and priority, in one library call (one crossing and one
        wake-up of the engine instead of one per tensor). Returns one handle
        per tensor, in order, for synchronize or synchronize_many. Every
        tensor is checked before any op is enqueued. drive: with
        HVD_CALLER_ROUNDS=1 (experimental), when the engine is only polling
        or asleep (shm), the calling thread runs the rounds until the last op
        completes (for a batch waited on at once)."""
        fw = self.fw
        xs = self._group(tensors, True)
        if len(names) != len(xs) or len(priorities) != len(xs):
            raise ValueError('expected a name and a priority per tensor: %d tensors, %d names, %d priorities'
                             % (len(xs), len(names), len(priorities)))
        check_op(op, process_set)
        prios = [check_priority(p) for p in priorities]
        srcs = [fw.contiguous(x) for x in xs]
        ptrs, dtypes, ndims, shapes = self._describe_group(srcs)
        enc = [(n or '').encode('utf-8') for n in names]
        c = _many_arrays(ptrs, dtypes, ndims, shapes, [len(e) for e in enc], prios)
        err = errbuf()
        first = check(_abi.library().hvd_allreduce_many_async(
            c[0], len(ptrs), c[0], len(ptrs), c[1], len(ptrs), c[2], len(ptrs), c[3], len(shapes), op,
            float(prescale_factor), float(postscale_factor), set_id(process_set), b''.join(enc), c[4], len(ptrs),
            c[5], len(ptrs), 1 if drive else 0, err, _abi.ERR_LEN), err)
        handles = []
        for i, (x, src) in enumerate(zip(xs, srcs)):
            handles.append(track(first + i, (x, src), _copied_back(fw, x, src)))
        return handles

    def _grouped_allreduce_async(self, tensors, in_place, name, op, prescale_factor, postscale_factor,
                                 process_set, priority=0):
        fw = self.fw
        xs = self._group(tensors, in_place)
        check_op(op, process_set)
        priority = check_priority(priority)
        srcs = [fw.contiguous(x) for x in xs]
        outs = srcs if in_place else [fw.empty_like(s) for s in srcs]
        ptrs, dtypes, ndims, shapes = self._describe_group(srcs)
        handle = _abi.grouped_allreduce_async(ptrs, [fw.address(o) for o in outs], dtypes, ndims, shapes, op,
                                              float(prescale_factor), float(postscale_factor),
                                              set_id(process_set), name, priority)
        if in_place:
            return track(handle, (xs, srcs), lambda: [fw.copy_back(x, s) for x, s in zip(xs, srcs)])
        return track(handle, (xs, srcs, outs), lambda: list(outs))

    def grouped_allreduce_async(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set, priority=0):
        op = handle_average_backwards_compatibility(op, average)
        return self._grouped_allreduce_async(tensors, False, name, op, prescale_factor, postscale_factor,
                                             process_set, priority)

    def grouped_allreduce_async_(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                                 postscale_factor=1.0, process_set=global_process_set, priority=0):
        op = handle_average_backwards_compatibility(op, average)
        return self._grouped_allreduce_async(tensors, True, name, op, prescale_factor, postscale_factor,
                                             process_set, priority)

    def grouped_allreduce(self, tensors, average, name, compression, op, prescale_factor, postscale_factor,
                          process_set, priority=0):
        pairs = [compression.compress(x) for x in self._group(tensors)]
        outs = synchronize(self.grouped_allreduce_async([p[0] for p in pairs], average, name, op, prescale_factor,
                                                        postscale_factor, process_set, priority))
        return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]

    def grouped_allreduce_(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                           postscale_factor=1.0, process_set=global_process_set, priority=0):
        return synchronize(self.grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                         postscale_factor, process_set, priority))

    # ---------------------------------------------------------- allgather

    def allgather_async(self, tensor, name=None, process_set=global_process_set, priority=0):
        x = self.fw.input(tensor, 'tensor')
        priority = check_priority(priority)
        src = self.fw.contiguous(x)
        ptr, dt, shape = self._describe(src)
        handle = _abi.allgather_async(ptr, dt, shape, set_id(process_set), name, priority)
        return track(handle, (x, src), lambda: self._output(handle, 0, x))

    def allgather(self, tensor, name=None, process_set=global_process_set, priority=0):
        return synchronize(self.allgather_async(tensor, name, process_set, priority))

    def grouped_allgather_async(self, tensors, name=None, process_set=global_process_set, priority=0):
        xs = self._group(tensors)
        priority = check_priority(priority)
        srcs = [self.fw.contiguous(x) for x in xs]
        ptrs, dtypes, ndims, shapes = self._describe_group(srcs)
        handle = _abi.grouped_allgather_async(ptrs, dtypes, ndims, shapes, set_id(process_set), name, priority)
        return track(handle, (xs, srcs), lambda: [self._output(handle, i, x) for i, x in enumerate(xs)])

    def grouped_allgather(self, tensors, name=None, process_set=global_process_set, priority=0):
        return synchronize(self.grouped_allgather_async(tensors, name, process_set, priority))

    # ---------------------------------------------------------- broadcast

    def _broadcast_async(self, tensor, root_rank, name, process_set, in_place, priority=0):
        fw = self.fw
        if in_place:
            x = fw.inplace(tensor, 'tensor')
            buf = fw.contiguous(x)
        else:
            x = fw.input(tensor, 'tensor')
            buf = fw.clone(x)
        root = fw.root_rank(root_rank)
        priority = check_priority(priority)
        ptr, dt, shape = self._describe(buf)
        handle = _abi.broadcast_async(ptr, dt, shape, root, set_id(process_set), name, priority)
        if in_place:
            return track(handle, (x, buf), lambda: fw.copy_back(x, buf))
        return track(handle, (x, buf), lambda: buf)

    def broadcast_async(self, tensor, root_rank, name=None, process_set=global_process_set, priority=0):
        return self._broadcast_async(tensor, root_rank, name, process_set, False, priority)

    def broadcast_async_(self, tensor, root_rank, name=None, process_set=global_process_set, priority=0):
        return self._broadcast_async(tensor, root_rank, name, process_set, True, priority)

    def broadcast(self, tensor, root_rank, name=None, process_set=global_process_set, priority=0):
        return synchronize(self.broadcast_async(tensor, root_rank, name, process_set, priority))

    def broadcast_(self, tensor, root_rank, name=None, process_set=global_process_set, priority=0):
        return synchronize(self.broadcast_async_(tensor, root_rank, name, process_set, priority))

    # ----------------------------------------------------------- alltoall

    def alltoall_async(self, tensor, splits=None, name=None, process_set=global_process_set, priority=0):
        fw = self.fw
        x = fw.input(tensor, 'tensor')
        splits = fw.splits(splits)
        priority = check_priority(priority)
        src = fw.contiguous(x)
        ptr, dt, shape = self._describe(src)
        handle = _abi.alltoall_async(ptr, dt, shape, splits, set_id(process_set), name, priority)

        def result():
            return self._output(handle, 0, x), fw.int32_vector(_abi.handle_received_splits(handle))

        return track(handle, (x, src), result)

    def alltoall(self, tensor, splits=None, name=None, process_set=global_process_set, priority=0):
        output, received = synchronize(self.alltoall_async(tensor, splits, name, process_set, priority))
        return output if splits is None else (output, received)

    # ------------------------------------------------------ reducescatter

    def reducescatter_async(self, tensor, name=None, op=None, process_set=global_process_set, prescale_factor=1.0,
                            postscale_factor=1.0, priority=0):
        x = self.fw.input(tensor, 'tensor')
        check_scatter_op(op)
        priority = check_priority(priority)
        src = self.fw.contiguous(x)
        ptr, dt, shape = self._describe(src)
        handle = _abi.reducescatter_async(ptr, dt, shape, op, float(prescale_factor), float(postscale_factor),
                                          set_id(process_set), name, priority)
        return track(handle, (x, src), lambda: self._output(handle, 0, x))

    def reducescatter(self, tensor, name, compression, op, process_set, prescale_factor, postscale_factor,
                      priority=0):
        compressed, ctx = compression.compress(self.fw.input(tensor, 'tensor'))
        out = synchronize(self.reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                                   postscale_factor, priority))
        return compression.decompress(out, ctx)

    def grouped_reducescatter_async(self, tensors, name=None, op=None, process_set=global_process_set,
                                    prescale_factor=1.0, postscale_factor=1.0, priority=0):
        xs = self._group(tensors)
        check_scatter_op(op)
        priority = check_priority(priority)
        srcs = [self.fw.contiguous(x) for x in xs]
        ptrs, dtypes, ndims, shapes = self._describe_group(srcs)
        handle = _abi.grouped_reducescatter_async(ptrs, dtypes, ndims, shapes, op, float(prescale_factor),
                                                  float(postscale_factor), set_id(process_set), name, priority)
        return track(handle, (xs, srcs), lambda: [self._output(handle, i, x) for i, x in enumerate(xs)])

    def grouped_reducescatter(self, tensors, name, compression, op, process_set, prescale_factor,
                              postscale_factor, priority=0):
        pairs = [compression.compress(x) for x in self._group(tensors)]
        outs = synchronize(self.grouped_reducescatter_async([p[0] for p in pairs], name, op, process_set,
                                                            prescale_factor, postscale_factor, priority))
        return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]

    # ----------------------------------------------------- point-to-point

    def _p2p(self, tensor, peer, what, tag, in_place):
        """Checks the arguments; returns the checked tensor, the view the op
        reads or writes, the contiguous buffer the engine uses (the view's
        memory when already contiguous), its description, peer and tag."""
        x = self.fw.inplace(tensor, 'tensor') if in_place else self.fw.input(tensor, 'tensor')
        peer = check_peer(peer, what)
        tag = check_tag(tag)
        view = self.fw.view(x)
        buf = self.fw.contiguous(view)
        return x, view, buf, self._describe(buf), peer, tag

    def isend(self, tensor, dst, tag=0, process_set=global_process_set):
        x, _, buf, (ptr, dt, shape), dst, tag = self._p2p(tensor, dst, 'dst', tag, False)
        handle = _abi.send_async(ptr, dt, shape, dst, tag, set_id(process_set))
        return track(handle, (x, buf), lambda: x)

    def irecv(self, tensor, src, tag=0, process_set=global_process_set):
        x, view, buf, (ptr, dt, shape), src, tag = self._p2p(tensor, src, 'src', tag, True)
        handle = _abi.recv_async(ptr, dt, shape, src, tag, set_id(process_set))
        return track(handle, (x, buf), lambda: (self.fw.copy_back(view, buf), x)[1])

    def send(self, tensor, dst, tag=0, process_set=global_process_set):
        _, _, _, (ptr, dt, shape), dst, tag = self._p2p(tensor, dst, 'dst', tag, False)
        _abi.send(ptr, dt, shape, dst, tag, set_id(process_set))

    def recv(self, tensor, src, tag=0, process_set=global_process_set):
        x, view, buf, (ptr, dt, shape), src, tag = self._p2p(tensor, src, 'src', tag, True)
        _abi.recv(ptr, dt, shape, src, tag, set_id(process_set))
        self.fw.copy_back(view, buf)
        return x

    # ----------------------------------------------------- object helpers

    def broadcast_object(self, obj, root_rank=0, name=None, process_set=global_process_set):
        """Pickles obj on root_rank and returns it on every member of the
        set (two in-place broadcasts: <name>.sz and <name>.t)."""
        fw = self.fw
        if name is None:
            name = type(obj).__name__
        if state.rank() == root_rank:
            payload = fw.bytes_tensor(fw.pickle.dumps(obj))
            self.broadcast_(fw.size_vector([fw.nbytes(payload)]), root_rank, name + '.sz', process_set)
        else:
            sz = fw.size_vector([0])
            self.broadcast_(sz, root_rank, name + '.sz', process_set)
            payload = fw.empty_bytes(fw.to_list(sz)[0])
        self.broadcast_(payload, root_rank, name + '.t', process_set)
        if state.rank() != root_rank:
            obj = fw.pickle.loads(fw.to_bytes(payload))
        return obj

    def allgather_object(self, obj, name=None, process_set=global_process_set):
        """Pickles obj and returns the list of every member's object, in
        set-rank order (two allgathers: <name>.sz and <name>.t)."""
        fw = self.fw
        if name is None:
            name = type(obj).__name__
        payload = fw.bytes_tensor(fw.pickle.dumps(obj))
        sizes = fw.to_list(self.allgather(fw.size_vector([fw.nbytes(payload)]), name + '.sz', process_set))
        gathered = fw.to_bytes(self.allgather(payload, name + '.t', process_set))
        objs, start = [], 0
        for n in sizes:
            objs.append(fw.pickle.loads(gathered[start:start + n]))
            start += n
        return objs
