"""Sharded checkpoints with a manifest, loadable at another layout
(docs/sharded-optimizer.md, "Checkpoints").

save() writes one file per rank (rank-00003.pt, torch.save) holding that
rank's pieces, and manifest.json (global rank 0) naming the layout, every
parameter's global name, shape and dtype, and where each piece lies: which
file, which tensor ("param" or an optimizer state key such as "exp_avg"),
which tensor-parallel chunk of the global tensor (the parameter's
hvd_tensor_parallel = (dim, index, count), absent: replicated over the
tensor-parallel set) and which flat element range of that chunk. A
ShardedOptimizer rank writes the range its slice owns, of the parameter and
of its state; an unsharded optimizer's state and the parameter are written
whole by the data-parallel set's first member; a parameter replicated over
the tensor-parallel set by its first member only. Scalars (step counts,
param group hyperparameters, extra) are stored once, in the manifest (extra
in extra.pt).

load() reads the manifest, checks the model against it, assembles from the
pieces (written at any layout) the chunk each parameter needs and, for a
ShardedOptimizer, the slice range of the state; a rank reads only the files
whose pieces overlap what it needs.

Both are collective over the whole job: every rank calls them, with its own
data_set (the data-parallel set it is in) and tensor_set (the
tensor-parallel one, or None).
"""
import glob
import json
import os
import shutil
import uuid

import torch

from hvd.torch.functions import allgather_object, broadcast_object
from hvd.torch.mpi_ops import rank, size
from hvd.torch.zero import ShardedOptimizer

FORMAT = 'hvd-sharded-checkpoint'
VERSION = 1
MANIFEST = 'manifest.json'
EXTRA = 'extra.pt'

# A seam for fault tests: when set, called on every rank with the temporary
# directory after every piece and the manifest are written, before the
# rename that publishes the checkpoint (a test makes it raise: a crash).
before_commit = None


def file_name(r):
    return 'rank-%05d.pt' % r


def _dtype_name(dtype):
    return str(dtype).replace('torch.', '')


def _chunk(p, name):
    """The parameter's tensor-parallel chunk [dim, index, count]
    (dim >= 0), or None when it is replicated over the tensor-parallel
    set."""
    tp = getattr(p, 'hvd_tensor_parallel', None)
    if tp is None:
        return None
    try:
        dim, index, count = (int(v) for v in tp)
    except (TypeError, ValueError):
        raise ValueError('hvd: %s.hvd_tensor_parallel must be (dim, index, count), not %r' % (name, tp))
    if not -p.dim() <= dim < p.dim() or not 0 <= index < count:
        raise ValueError('hvd: %s.hvd_tensor_parallel = %r does not fit a tensor of shape %s' %
                         (name, tp, list(p.shape)))
    return [dim % p.dim(), index, count]


def _global_shape(p, chunk):
    shape = list(p.shape)
    if chunk is not None:
        shape[chunk[0]] *= chunk[2]
    return shape


def _scalar(v):
    if torch.is_tensor(v):
        return {'value': v.item(), 'tensor': True, 'dtype': _dtype_name(v.dtype), 'shape': list(v.shape)}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {'value': v}
    raise ValueError('hvd: optimizer state value %r cannot be saved as a scalar' % (v,))


def _unscalar(s, device):
    if s.get('tensor'):
        return torch.tensor(s['value'], dtype=getattr(torch, s['dtype']), device=device).reshape(s['shape'])
    return s['value']


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        out = [_jsonable(x) for x in v]
        return _SKIP if any(x is _SKIP for x in out) else out
    if torch.is_tensor(v) and v.numel() == 1:
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return _SKIP


_SKIP = object()


def _hyper(group):
    out = {}
    for k, v in group.items():
        if k != 'params':
            j = _jsonable(v)
            if j is not _SKIP:
                out[k] = j
    return out


def _groups_of(optimizer):
    """{param: index of its group}, and the groups' hyperparameters."""
    if optimizer is None:
        return {}, []
    return ({p: i for i, g in enumerate(optimizer.param_groups) for p in g['params']},
            [_hyper(g) for g in optimizer.param_groups])


def _elementwise(v, numel):
    return torch.is_tensor(v) and v.dim() >= 1 and v.numel() == numel


def _optimizer_name(optimizer):
    if isinstance(optimizer, ShardedOptimizer):
        return type(optimizer.optimizer).__name__
    return None if optimizer is None else type(optimizer).__name__


def _set_index(ps):
    return 0 if ps is None else ps.rank()


def _check_sets(optimizer, data_set, tensor_set):
    if data_set is None or not data_set.included():
        raise ValueError('hvd: checkpoint: data_set must be the data-parallel process set this rank (%d) is in, '
                         'not %s' % (rank(), data_set))
    if tensor_set is not None and not tensor_set.included():
        raise ValueError('hvd: checkpoint: rank %d is not in tensor_set %s' % (rank(), tensor_set))
    if isinstance(optimizer, ShardedOptimizer) and optimizer.process_set.ranks != data_set.ranks:
        raise ValueError('hvd: checkpoint: the ShardedOptimizer shards over %s, not over data_set %s' %
                         (optimizer.process_set.ranks, data_set.ranks))


# ------------------------------------------------------------------- save

def _pieces(named, optimizer, data_set, tensor_set):
    """This rank's pieces {key: flat tensor} and their descriptions."""
    me = file_name(rank())
    dp, tp = _set_index(data_set), _set_index(tensor_set)
    sharded = isinstance(optimizer, ShardedOptimizer)
    group_of, hypers = _groups_of(optimizer)
    tensors, params = {}, {}
    for name, p in named:
        chunk = _chunk(p, name)
        entry = {'shape': _global_shape(p, chunk), 'dtype': _dtype_name(p.dtype), 'pieces': [], 'scalars': None,
                 'group': None}
        params[name] = entry
        if chunk is None and tp != 0:
            continue  # a copy of tensor-parallel member 0's
        owned = optimizer.owned_range(p) if sharded else None
        n = p.numel()
        if owned is not None:
            a, b, shard, s = owned
            state = {k: v[s:s + b - a] for k, v in optimizer.optimizer.state.get(shard, {}).items()
                     if _elementwise(v, shard.numel())}
            scalars = {k: _scalar(v) for k, v in optimizer.optimizer.state.get(shard, {}).items()
                       if not _elementwise(v, shard.numel())}
            first = a == 0 and b > 0 or n == 0 and dp == 0
        elif dp == 0:
            a, b = 0, n
            st = optimizer.state.get(p, {}) if optimizer is not None and not sharded else {}
            state = {k: v.reshape(-1) for k, v in st.items() if _elementwise(v, n)}
            scalars = {k: _scalar(v) for k, v in st.items() if not _elementwise(v, n)}
            first = True
        else:
            continue
        if first:
            entry['scalars'] = scalars
            if p in group_of:
                entry['group'] = hypers[group_of[p]]
        if a == b:
            continue
        for key, flat in [('param', p.detach().reshape(-1)[a:b])] + sorted(state.items()):
            k = '%s|%s' % (name, key)
            tensors[k] = flat.detach().to('cpu').clone()
            entry['pieces'].append({'file': me, 'key': key, 'tkey': k, 'chunk': chunk or [0, 0, 1],
                                    'range': [a, b]})
    return tensors, params


def _merge(descrs):
    """The manifest's params from every rank's descriptions (the same on
    every rank: each merges what allgather gave it); ValueError when ranks
    disagree about a parameter."""
    params, groups, group_ids = {}, [], {}
    for r, d in enumerate(descrs):
        for name, e in d.items():
            m = params.get(name)
            if m is None:
                m = params[name] = {'shape': e['shape'], 'dtype': e['dtype'], 'pieces': [], 'scalars': None,
                                    'group': None}
            elif (m['shape'], m['dtype']) != (e['shape'], e['dtype']):
                raise ValueError('hvd: checkpoint: ranks disagree about %s: %s %s on one, %s %s on rank %d' %
                                 (name, m['shape'], m['dtype'], e['shape'], e['dtype'], r))
            have = {(x['key'], tuple(x['chunk']), tuple(x['range'])) for x in m['pieces']}
            for x in e['pieces']:
                if (x['key'], tuple(x['chunk']), tuple(x['range'])) not in have:
                    m['pieces'].append(x)
            if m['scalars'] is None and e['scalars'] is not None:
                m['scalars'] = e['scalars']
            if m['group'] is None and e['group'] is not None:
                key = json.dumps(e['group'], sort_keys=True)
                if key not in group_ids:
                    group_ids[key] = len(groups)
                    groups.append(e['group'])
                m['group'] = group_ids[key]
    return params, groups


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path, write):
    with open(path, 'wb') as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def save(directory, named_parameters, optimizer, *, data_set, tensor_set=None, extra=None):
    """Saves the parameters and optimizer state as a sharded checkpoint in
    directory (replacing one there only once every piece is written).
    Collective over every rank of the job.

    named_parameters: (global name, parameter) pairs, the names equal at
        every layout; a parameter's hvd_tensor_parallel = (dim, index,
        count) says it is chunk index of count along dim of the global
        tensor (absent: the same on every member of tensor_set);
    optimizer: a ShardedOptimizer (over data_set), a torch optimizer or an
        hvd DistributedOptimizer (state saved whole), or None;
    data_set, tensor_set: this rank's data-parallel and tensor-parallel
        process sets (tensor_set None: no tensor parallelism);
    extra: any picklable object (step counter, LR scheduler state), stored
        once and returned by load()."""
    err = None
    try:
        _check_sets(optimizer, data_set, tensor_set)
    except ValueError as e:
        err = 'rank %d: %s' % (rank(), e)
    errs = [e for e in allgather_object(err, name='hvd.checkpoint.save.check') if e]
    if errs:
        raise ValueError('hvd: checkpoint %s was not saved: %s' % (directory, '; '.join(errs)))
    directory = os.path.abspath(directory)
    named = list(named_parameters)
    token = None
    if rank() == 0:
        token = uuid.uuid4().hex[:12]
        for stale in glob.glob(directory + '.tmp-*'):
            shutil.rmtree(stale, ignore_errors=True)
        os.makedirs(os.path.dirname(directory) or '.', exist_ok=True)
        os.makedirs(directory + '.tmp-' + token)
    token = broadcast_object(token, root_rank=0, name='hvd.checkpoint.save.dir')
    tmp = directory + '.tmp-' + token
    err, descr = None, None
    try:
        tensors, descr = _pieces(named, optimizer, data_set, tensor_set)
        _write(os.path.join(tmp, file_name(rank())),
               lambda f: torch.save({'format': FORMAT, 'rank': rank(), 'pieces': tensors}, f))
        if rank() == 0 and extra is not None:
            _write(os.path.join(tmp, EXTRA), lambda f: torch.save(extra, f))
    except (OSError, ValueError, RuntimeError) as e:
        err = 'rank %d: %s' % (rank(), e)
    gathered = allgather_object((err, descr), name='hvd.checkpoint.save.pieces')
    errs = [e for e, _ in gathered if e]
    if errs:
        raise ValueError('hvd: checkpoint %s was not saved: %s' % (directory, '; '.join(errs)))
    params, groups = _merge([d for _, d in gathered])
    status = None
    if rank() == 0:
        manifest = {
            'format': FORMAT, 'version': VERSION,
            'layout': {'world_size': size(), 'data_size': data_set.size(),
                       'tensor_size': 1 if tensor_set is None else tensor_set.size(),
                       'optimizer': _optimizer_name(optimizer),
                       'zero_stage': optimizer.stage if isinstance(optimizer, ShardedOptimizer) else None},
            'files': [file_name(r) for r in range(size())],
            'extra': EXTRA if extra is not None else None,
            'groups': groups,
            'params': params,
        }
        try:
            _write(os.path.join(tmp, MANIFEST), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
        except OSError as e:
            status = 'rank 0 could not write the manifest: %s' % e
    if before_commit is not None:
        before_commit(tmp)
    if rank() == 0 and status is None:
        old = directory + '.old-' + token
        try:
            _fsync_dir(tmp)
            if os.path.exists(directory):
                os.rename(directory, old)
            os.rename(tmp, directory)
            _fsync_dir(os.path.dirname(directory))
            shutil.rmtree(old, ignore_errors=True)
        except OSError as e:
            status = 'rank 0 could not publish %s: %s' % (tmp, e)
    status = broadcast_object(status, root_rank=0, name='hvd.checkpoint.save.done')
    if status is not None:
        raise ValueError('hvd: checkpoint %s was not saved: %s' % (directory, status))


# ------------------------------------------------------------------- load

def read_manifest(directory):
    """The checkpoint's manifest; ValueError naming the file when it is
    missing or malformed."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        olds = glob.glob(os.path.abspath(directory) + '.old-*')
        hint = ' (an interrupted save left the previous checkpoint at %s)' % olds[0] if olds else ''
        raise ValueError('hvd: %s does not exist: %s is not a checkpoint, or its save did not finish%s' %
                         (path, directory, hint))
    except (OSError, ValueError) as e:
        raise ValueError('hvd: %s is not a readable checkpoint manifest: %s' % (path, e))
    if not isinstance(manifest, dict) or manifest.get('format') != FORMAT or \
            not isinstance(manifest.get('params'), dict):
        raise ValueError('hvd: %s is not an hvd checkpoint manifest (format %r, want %r, and a params table)' %
                         (path, manifest.get('format') if isinstance(manifest, dict) else None, FORMAT))
    if manifest.get('version') != VERSION:
        raise ValueError('hvd: %s has version %r; this hvd reads version %d' % (path, manifest.get('version'), VERSION))
    return manifest


def _box(shape, chunk):
    """The chunk's [start, end) per dimension of the global tensor."""
    box = [[0, s] for s in shape]
    dim, index, count = chunk
    n = shape[dim] // count
    box[dim] = [index * n, (index + 1) * n]
    return box


def _overlap(b1, b2):
    return all(max(x[0], y[0]) < min(x[1], y[1]) for x, y in zip(b1, b2))


class _Files:
    """The checkpoint's rank files, each read once when first needed."""

    def __init__(self, directory):
        self.directory = directory
        self.loaded = {}

    def piece(self, pc):
        f = pc['file']
        if f not in self.loaded:
            path = os.path.join(self.directory, f)
            try:
                self.loaded[f] = torch.load(path, map_location='cpu')['pieces']
            except FileNotFoundError:
                raise ValueError('hvd: checkpoint %s is missing %s (named in its manifest)' % (self.directory, f))
            except Exception as e:  # torch.load raises many kinds on a damaged file
                raise ValueError('hvd: checkpoint file %s cannot be read: %s' % (path, e))
        try:
            return self.loaded[f][pc['tkey']]
        except KeyError:
            raise ValueError('hvd: checkpoint file %s has no piece %s' % (os.path.join(self.directory, f), pc['tkey']))


def _assemble(files, name, entry, key, chunk, rng):
    """The flat elements rng = [a, b) of chunk (of the global tensor) of
    name's tensor key, from the pieces that overlap it."""
    shape = entry['shape']
    dtype = getattr(torch, entry['dtype'])
    want = _box(shape, chunk)
    full = torch.empty(shape, dtype=dtype)
    mask = torch.zeros(shape, dtype=torch.bool)
    by_chunk = {}
    for pc in entry['pieces']:
        if pc['key'] != key:
            continue
        if not _overlap(_box(shape, pc['chunk']), want):
            continue
        same = _box(shape, pc['chunk']) == want
        if same and (pc['range'][1] <= rng[0] or pc['range'][0] >= rng[1]):
            continue  # the same chunk, another part of it
        by_chunk.setdefault(tuple(pc['chunk']), []).append(pc)
    for ch, pcs in by_chunk.items():
        dim, index, count = ch
        n = shape[dim] // count
        view = full.narrow(dim, index * n, n)
        mview = mask.narrow(dim, index * n, n)
        flat = torch.empty(view.numel(), dtype=dtype)
        mflat = torch.zeros(view.numel(), dtype=torch.bool)
        for pc in pcs:
            a, b = pc['range']
            t = files.piece(pc)
            if t.numel() != b - a:
                raise ValueError('hvd: checkpoint piece %s holds %d elements, its manifest says %d' %
                                 (pc['tkey'], t.numel(), b - a))
            flat[a:b] = t.to(dtype)
            mflat[a:b] = True
        view.copy_(flat.view(view.shape))
        mview.copy_(mflat.view(view.shape))
    a, b = rng
    out = full.narrow(chunk[0], want[chunk[0]][0], want[chunk[0]][1] - want[chunk[0]][0]).reshape(-1)[a:b]
    got = mask.narrow(chunk[0], want[chunk[0]][0], want[chunk[0]][1] - want[chunk[0]][0]).reshape(-1)[a:b]
    if not bool(got.all()):
        raise ValueError('hvd: checkpoint is missing %d elements of %s (%s) that chunk %s needs' %
                         (int((~got).sum()), name, key, chunk))
    return out.clone()


def _check_model(directory, manifest, named):
    """[(name, param, chunk, entry)]; ValueError naming the first parameter
    the checkpoint does not match."""
    out = []
    for name, p in named:
        chunk = _chunk(p, name)
        shape = _global_shape(p, chunk)
        entry = manifest['params'].get(name)
        if entry is None:
            raise ValueError('hvd: checkpoint %s does not match the model: it has no parameter %s' %
                             (directory, name))
        if entry['shape'] != shape:
            raise ValueError('hvd: checkpoint %s does not match the model: %s is %s in the checkpoint and %s here' %
                             (directory, name, entry['shape'], shape))
        if entry['dtype'] != _dtype_name(p.dtype):
            raise ValueError('hvd: checkpoint %s does not match the model: %s is %s in the checkpoint and %s here' %
                             (directory, name, entry['dtype'], _dtype_name(p.dtype)))
        if chunk is not None and shape[chunk[0]] % chunk[2]:
            raise ValueError('hvd: %s: %d chunks along dim %d' % (name, chunk[2], chunk[0]))
        out.append((name, p, chunk or [0, 0, 1], entry))
    return out


def _restore_hyper(optimizer, manifest, todo):
    if optimizer is None:
        return
    saved = manifest.get('groups') or []
    group_of = {p: entry['group'] for _, p, _, entry in todo}
    for g in optimizer.param_groups:
        idx = next((group_of[p] for p in g['params'] if group_of.get(p) is not None), None)
        if idx is None or idx >= len(saved):
            continue
        for k, v in saved[idx].items():
            if k in g and k != 'params':
                g[k] = tuple(v) if isinstance(g[k], tuple) and isinstance(v, list) else v


def _load_local(directory, named, optimizer):
    manifest = read_manifest(directory)
    todo = _check_model(directory, manifest, named)
    files = _Files(directory)
    sharded = isinstance(optimizer, ShardedOptimizer)
    for name, p, chunk, entry in todo:
        n = p.numel()
        keys = sorted({pc['key'] for pc in entry['pieces']} - {'param'})
        scalars = entry.get('scalars') or {}
        with torch.no_grad():
            p.copy_(_assemble(files, name, entry, 'param', chunk, [0, n]).view(p.shape))
        if optimizer is None:
            continue
        owned = optimizer.owned_range(p) if sharded else None
        if owned is not None:
            a, b, shard, s = owned
            if not keys and not scalars:
                continue
            st = optimizer.optimizer.state[shard]
            for k in keys:
                if k not in st:
                    st[k] = torch.zeros_like(shard)
                if b > a:
                    st[k][s:s + b - a].copy_(_assemble(files, name, entry, k, chunk, [a, b]))
            for k, v in scalars.items():
                st[k] = _unscalar(v, shard.device)
        elif not sharded and (keys or scalars):
            st = optimizer.state[p]
            for k in keys:
                st[k] = _assemble(files, name, entry, k, chunk, [0, n]).view(p.shape).to(p.device)
            for k, v in scalars.items():
                st[k] = _unscalar(v, p.device)
    _restore_hyper(optimizer, manifest, todo)
    extra = None
    if manifest.get('extra'):
        path = os.path.join(directory, manifest['extra'])
        try:
            extra = torch.load(path, map_location='cpu')
        except Exception as e:
            raise ValueError('hvd: checkpoint file %s cannot be read: %s' % (path, e))
    return extra


def load(directory, named_parameters, optimizer, *, data_set, tensor_set=None):
    """Loads a checkpoint written by save() at any layout into this rank's
    parameters (their chunks, from hvd_tensor_parallel) and optimizer state
    (a ShardedOptimizer's slice ranges, or whole for another optimizer);
    returns save()'s extra. Collective over every rank: when any rank fails
    (a missing or malformed manifest, a model the checkpoint does not
    match, a missing file), every rank raises ValueError naming it."""
    err, extra = None, None
    try:
        _check_sets(optimizer, data_set, tensor_set)
        extra = _load_local(directory, list(named_parameters), optimizer)
    except ValueError as e:
        err = str(e)
    errs = allgather_object(err, name='hvd.checkpoint.load')
    bad = [(r, e) for r, e in enumerate(errs) if e]
    if bad:
        r, e = bad[0]
        raise ValueError(err if err else '%s (on rank %d)' % (e, r))
    return extra
