"""A fake hvd.torch for testing generated pipeline code in one process: ranks are threads.

It implements only what the generated split job uses, with the semantics the real hvd.torch
documents, as strictly as it can check them:

  init(process_sets)      ranks in range, no duplicates, no set equal to the global set or to
                          another; every rank must pass the same list. Ids 1, 2, ... in order.
  isend / irecv           non-blocking; matched first-in first-out per (process set, sender,
                          receiver); the tag, dtype and element count must match (else both ops
                          fail). A send completes only when the matching receive is posted and
                          has the data (rendezvous), so a program that waits for a send before
                          its receiver posts the receive deadlocks here as it would on shared
                          memory. The sent buffer must not change before the send completes.
                          Both ranks must be members of the set and different.
  synchronize / poll      wait (with a timeout that reports a deadlock) / test.
  allreduce, broadcast_parameters, allgather_object
                          blocking collectives over a set, matched by call order per set, names
                          checked.
  DistributedOptimizer    counts each parameter's gradients per step and requires exactly
                          backward_passes_per_step of them, then averages .grad over the set and
                          steps the wrapped optimizer.

A World holds the shared state; the simulation sets the calling thread's rank with
set_rank(world, rank). An error on one rank aborts every other rank's waits.
"""
import collections
import itertools
import threading

import torch

TIMEOUT = 60.0  # seconds a wait may take before it is reported as a deadlock

Average = "Average"
Sum = "Sum"

_tls = threading.local()


class FakeError(RuntimeError):
    pass


class World:
    def __init__(self, size, timeout=TIMEOUT):
        self.size = size
        self.timeout = timeout
        self.cv = threading.Condition()
        self.failed = None          # the first error: every wait gives up
        self.registered = None      # the process set rank lists of the first init
        self.channels = collections.defaultdict(lambda: (collections.deque(), collections.deque()))
        self.colls = {}             # (set id, seq) -> {"name", "values": {rank: value}, "result"}
        self.seq = collections.Counter()  # (set id, rank) -> collectives started
        self.handles = {}
        self.next_handle = itertools.count(1)
        self.stats = collections.Counter()

    def fail(self, msg):
        with self.cv:
            if self.failed is None:
                self.failed = msg
            self.cv.notify_all()

    def wait(self, pred, what):
        """Waits under self.cv until pred() holds; raises on timeout or another rank's failure."""
        if not self.cv.wait_for(lambda: pred() or self.failed is not None, timeout=self.timeout):
            msg = "rank %d: %s did not complete in %.0f s: deadlock?" % (rank(), what, self.timeout)
            self.failed = self.failed or msg
            self.cv.notify_all()
            raise FakeError(msg)
        if not pred():
            raise FakeError("rank %d: gave up on %s: %s" % (rank(), what, self.failed))


def set_rank(world, r):
    _tls.world = world
    _tls.rank = r
    _tls.sets = None


def _world():
    w = getattr(_tls, "world", None)
    if w is None:
        raise FakeError("fakehvd: this thread has no rank (set_rank)")
    return w


# ---- process sets and init ----

class ProcessSet:
    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def size(self):
        return len(self.ranks)

    def rank(self):
        return self.ranks.index(rank())

    def included(self):
        return rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


class _GlobalSet(ProcessSet):
    """The global set: its ranks are the current world's."""

    def __init__(self):
        self.process_set_id = 0

    @property
    def ranks(self):
        return list(range(_world().size))


global_process_set = _GlobalSet()


def init(process_sets=None):
    w = _world()
    sets = list(process_sets or [])
    lists = []
    everyone = list(range(w.size))
    for i, ps in enumerate(sets):
        if not isinstance(ps, ProcessSet):
            raise ValueError("process_sets[%d] is not a ProcessSet" % i)
        r = ps.ranks
        if not r or any(x < 0 or x >= w.size for x in r):
            raise ValueError("process set #%d %s: invalid rank (job size is %d)" % (i + 1, r, w.size))
        if len(set(r)) != len(r):
            raise ValueError("process set #%d %s: duplicate rank" % (i + 1, r))
        if r == everyone or r in lists:
            raise ValueError("process set #%d %s duplicates another set or the global set" % (i + 1, r))
        lists.append(r)
    with w.cv:
        if w.registered is None:
            w.registered = lists
        elif w.registered != lists:
            msg = "rank %d registered process sets %s, rank(s) before it %s" % (rank(), lists, w.registered)
            w.failed = w.failed or msg
            w.cv.notify_all()
            raise FakeError(msg)
    for i, ps in enumerate(sets):
        ps.process_set_id = i + 1
    _tls.sets = {0: global_process_set}
    _tls.sets.update({i + 1: ps for i, ps in enumerate(sets)})


def rank():
    return _tls.rank


def size():
    return _world().size


def _check_set(ps, what):
    if getattr(_tls, "sets", None) is None:
        raise FakeError("rank %d: %s before hvd.init" % (rank(), what))
    if not isinstance(ps, ProcessSet) or ps.process_set_id not in _tls.sets or _tls.sets[ps.process_set_id].ranks != ps.ranks:
        raise FakeError("rank %d: %s on an unregistered process set %r" % (rank(), what, ps))
    if rank() not in ps.ranks:
        raise FakeError("rank %d: %s on process set %s, which it is not a member of" % (rank(), what, ps.ranks))


# ---- point-to-point ----

class _Op:
    def __init__(self, kind, tensor, peer, tag, ps):
        self.kind, self.tensor, self.peer, self.tag, self.ps = kind, tensor, peer, tag, ps
        self.rank = rank()
        self.done = False
        self.error = None
        self.snapshot = tensor.clone() if kind == "send" else None

    def describe(self):
        if self.kind == "send":
            return "isend(to %d, tag %d, set %d)" % (self.peer, self.tag, self.ps.process_set_id)
        return "irecv(from %d, tag %d, set %d)" % (self.peer, self.tag, self.ps.process_set_id)


def _post(kind, tensor, peer, tag, process_set):
    what = "%s(%s %d, tag %d)" % (kind, "to" if kind == "send" else "from", peer, tag)
    _check_set(process_set, what)
    if peer not in process_set.ranks:
        raise FakeError("rank %d: %s: %d is not a member of process set %s" % (rank(), what, peer, process_set.ranks))
    if peer == rank():
        raise FakeError("rank %d: %s to itself" % (rank(), what))
    if not isinstance(tensor, torch.Tensor) or not tensor.is_contiguous():
        raise FakeError("rank %d: %s: needs a contiguous tensor" % (rank(), what))
    if tensor.requires_grad:
        raise FakeError("rank %d: %s: the tensor requires grad (send .detach())" % (rank(), what))
    w = _world()
    op = _Op(kind, tensor, peer, tag, process_set)
    with w.cv:
        if kind == "send":
            key = (process_set.process_set_id, rank(), peer)
            w.channels[key][0].append(op)
        else:
            key = (process_set.process_set_id, peer, rank())
            w.channels[key][1].append(op)
        _match(w, key)
        h = next(w.next_handle)
        w.handles[h] = op
        w.stats[kind] += 1
    return h


def _match(w, key):
    sends, recvs = w.channels[key]
    while sends and recvs:
        s, r = sends.popleft(), recvs.popleft()
        err = None
        if s.tag != r.tag:
            err = "tag mismatch: rank %d sent tag %d, rank %d receives tag %d" % (s.rank, s.tag, r.rank, r.tag)
        elif s.tensor.dtype != r.tensor.dtype or s.tensor.numel() != r.tensor.numel():
            err = "size mismatch: rank %d sends %s[%d], rank %d receives into %s[%d]" % (
                s.rank, s.tensor.dtype, s.tensor.numel(), r.rank, r.tensor.dtype, r.tensor.numel())
        elif not torch.equal(s.tensor, s.snapshot):
            err = "rank %d changed the buffer of %s before it completed" % (s.rank, s.describe())
        if err is None:
            with torch.no_grad():
                r.tensor.view(-1).copy_(s.tensor.view(-1))
        else:
            s.error = r.error = err
            w.failed = w.failed or err
        s.done = r.done = True
        w.stats["matched"] += 1
    w.cv.notify_all()


def isend(tensor, dst, tag=0, process_set=global_process_set):
    return _post("send", tensor, dst, tag, process_set)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    return _post("recv", tensor, src, tag, process_set)


def poll(handle):
    w = _world()
    with w.cv:
        return w.handles[handle].done


def synchronize(handle):
    w = _world()
    with w.cv:
        op = w.handles.get(handle)
        if op is None:
            raise FakeError("rank %d: synchronize(%r): unknown handle" % (rank(), handle))
        if op.rank != rank():
            raise FakeError("rank %d: synchronize of rank %d's handle" % (rank(), op.rank))
        w.wait(lambda: op.done, op.describe())
        del w.handles[handle]
        if op.error:
            raise FakeError("rank %d: %s failed: %s" % (rank(), op.describe(), op.error))
        return op.tensor


# ---- collectives ----

def _collective(process_set, name, value, combine):
    _check_set(process_set, "collective %s" % name)
    w = _world()
    sid = process_set.process_set_id
    with w.cv:
        seq = w.seq[(sid, rank())]
        w.seq[(sid, rank())] += 1
        c = w.colls.setdefault((sid, seq), {"name": name, "values": {}, "result": None, "left": len(process_set.ranks)})
        if c["name"] != name:
            msg = "collective #%d on set %s: rank %d calls %r, another rank %r" % (seq, process_set.ranks, rank(), name, c["name"])
            w.failed = w.failed or msg
            w.cv.notify_all()
            raise FakeError(msg)
        c["values"][rank()] = value
        if len(c["values"]) == len(process_set.ranks):
            c["result"] = combine([c["values"][r] for r in process_set.ranks])
            w.stats["collectives"] += 1
            w.cv.notify_all()
        w.wait(lambda: c["result"] is not None, "collective %s on set %s" % (name, process_set.ranks))
        result = c["result"]
        c["left"] -= 1
        if c["left"] == 0:
            del w.colls[(sid, seq)]
        return result


def allreduce(tensor, average=None, name=None, op=Average, process_set=global_process_set, **_):
    if average is not None:
        op = Average if average else Sum

    def combine(vals):
        total = vals[0].clone()
        for v in vals[1:]:
            total += v
        return total / len(vals) if op == Average else total

    return _collective(process_set, "allreduce." + str(name), tensor.detach().clone(), combine).clone()


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    if isinstance(params, dict):
        params = sorted(params.items())
    params = [p if isinstance(p, tuple) else (None, p) for p in params]
    idx = process_set.ranks.index(root_rank)
    for name, p in params:
        value = _collective(process_set, "broadcast." + str(name), p.detach().clone(), lambda vals: vals[idx])
        with torch.no_grad():
            p.copy_(value)


def allgather_object(obj, name=None, process_set=global_process_set):
    return _collective(process_set, "allgather_object." + str(name), obj, list)


class _DistributedOptimizer:
    def __init__(self, optimizer, named_parameters, backward_passes_per_step, op, process_set):
        self.optimizer = optimizer
        self.named = list(named_parameters)
        self.passes = backward_passes_per_step
        self.op = op
        self.process_set = process_set
        _check_set(process_set, "DistributedOptimizer")
        self.counts = collections.Counter()
        for name, p in self.named:
            p.register_hook(self._counter(name))
        opt_ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if opt_ids != {id(p) for _, p in self.named}:
            raise FakeError("DistributedOptimizer: named_parameters are not the optimizer's parameters")

    def _counter(self, name):
        def hook(grad):
            self.counts[name] += 1
        return hook

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        for name, p in self.named:
            if self.counts[name] != self.passes:
                raise FakeError("rank %d: parameter %s got %d gradients this step, but backward_passes_per_step is %d"
                                % (rank(), name, self.counts[name], self.passes))
        for name, p in self.named:
            p.grad.copy_(allreduce(p.grad, name=name, op=self.op, process_set=self.process_set))
        self.counts.clear()
        self.optimizer.step()

    @property
    def param_groups(self):
        return self.optimizer.param_groups


def DistributedOptimizer(optimizer, named_parameters=None, compression=None, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    return _DistributedOptimizer(optimizer, named_parameters, backward_passes_per_step, op, process_set)
