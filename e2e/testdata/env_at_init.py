"""Settings made in the script, as Horovod users make them: through
os.environ, before `import hvd.torch` or after it but before hvd.init().
Run under hvdrun by e2e/python_test.go TestPythonSettingsAtInit:

    env_at_init.py MODE OUTDIR

Each mode prints "ok <mode>" on success; failures raise."""
import json
import os
import sys

mode, outdir = sys.argv[1], sys.argv[2]

if mode == 'dynamic-before-import':
    os.environ['HOROVOD_DYNAMIC_PROCESS_SETS'] = '1'

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402

rank = int(os.environ['HOROVOD_RANK'])
path = os.path.join(outdir, 'timeline-%s.json' % mode)

if mode == 'timeline':
    os.environ['HOROVOD_TIMELINE'] = path
    os.environ['HOROVOD_TIMELINE_MARK_CYCLES'] = '1'
    hvd.init()
    hvd.allreduce(torch.ones(4), name='env.tl')
    hvd.shutdown()
    if rank == 0:
        events = json.load(open(path))
        names = {e.get('name') for e in events}
        assert any(str(n).endswith('ALLREDUCE') for n in names), names
        assert 'CYCLE_START' in names, names
elif mode == 'timeline-dynamic':
    os.environ['HOROVOD_TIMELINE'] = 'DYNAMIC'
    hvd.init()
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(4), name='env.dyn')
    hvd.stop_timeline()
    if rank == 0:
        assert any(str(e.get('name')).endswith('ALLREDUCE') for e in json.load(open(path)))
elif mode in ('dynamic-before-import', 'dynamic-after-import'):
    if mode == 'dynamic-after-import':
        os.environ['HOROVOD_DYNAMIC_PROCESS_SETS'] = '1'
    hvd.init()
    ps = hvd.add_process_set([0, 1])
    if rank in ps.ranks:
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=ps)
        assert out.tolist() == [2.0, 2.0], out
    assert hvd.remove_process_set(ps)
elif mode == 'bad-knob':
    os.environ['HOROVOD_CACHE_CAPACITY'] = 'NaN'
    try:
        hvd.init()
    except ValueError as e:
        assert 'HOROVOD_CACHE_CAPACITY' in str(e) and 'NaN' in str(e), e
    else:
        raise AssertionError('HOROVOD_CACHE_CAPACITY=NaN set before init was not read')
    # Fixed in the same process: init reads the environment again.
    os.environ['HOROVOD_CACHE_CAPACITY'] = '0'
    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='env.fixed').item() == hvd.size()
elif mode == 'unset-before-init':
    # hvdrun started the ranks with a bad value; the script removes it.
    assert os.environ['HOROVOD_FUSION_THRESHOLD'] == 'bogus'
    del os.environ['HOROVOD_FUSION_THRESHOLD']
    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name='env.unset').item() == hvd.size()
else:
    raise SystemExit('unknown mode ' + mode)
print('ok', mode)
