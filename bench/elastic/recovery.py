"""Elastic recovery benchmark (docs/performance.md, "Elastic recovery").

Runs e2e/testdata/elastic_train.py under hvdrun's elastic driver with
default settings and measures, on one clock (CLOCK_MONOTONIC: this script's
time.monotonic(), the training script's, and the sdk's HVD_ELASTIC_TRACE=1
lines), two events:

kill   np = 4 on hosts localhost:2, 127.0.0.1:1, 127.0.0.2:1; the worker
       127.0.0.2:0 (rank 3) is killed with SIGKILL; the three survivors go on
       in a world of 3. From the kill to the first completed training step
       of the new world, per phase:
         detect     kill -> the survivors' collective fails (HorovodInternalError)
         restore    -> the survivors have restored the last commit, shut the
                       old world down and call init (sdk trace "init")
         assign     -> the driver's assignment of the next world is read
                       (driver: sees the exit, blacklists, publishes)
         rendezvous -> the new world is up: rendezvous in the new epoch,
                       communicators and process sets rebuilt (sdk trace "world")
         sync       -> the state is synced from rank 0 (want_sync allreduce,
                       broadcasts of parameters, optimizer state, sampler, objects)
         step       -> the first training step of the new world completed
       Each phase ends when the last survivor reaches it.
grow   np = 3 on localhost:2, 127.0.0.1:1; the discovery script starts
       answering 127.0.0.2:1 too. From that change to the first step of the
       world of 4: discovery poll and publish (the driver's "world 1" line),
       the new process's start to its init (Python and torch imported), the
       survivors' next commit (HostsUpdatedInterrupt), the rendezvous and
       sync, the first step.

Usage: recovery.py --hvdrun BIN --pythonpath DIR --script PY --out DIR [--trials N]
Writes DIR/kill.json, DIR/grow.json (every trial's events) and prints
Markdown tables (median, min, max over trials).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LINE = re.compile(r'^\[([^\]]+)\]<(stdout|stderr)>:(.*)$')
KV = re.compile(r'(\w+)=(\S+)')


class Job:
    """An elastic job whose output lines are timestamped as they arrive."""

    def __init__(self, args, hosts, np):
        self.dir = tempfile.mkdtemp(prefix='hvd-elastic-bench-')
        self.hosts_file = os.path.join(self.dir, 'hosts')
        self.set_hosts(hosts)
        disc = os.path.join(self.dir, 'discover.sh')
        with open(disc, 'w') as f:
            f.write('#!/bin/sh\ncat %s\n' % self.hosts_file)
        os.chmod(disc, 0o755)
        env = dict(os.environ, PYTHONPATH=args.pythonpath, PYTHONDONTWRITEBYTECODE='1',
                   HOROVOD_DYNAMIC_PROCESS_SETS='1', HVD_ELASTIC_TRACE='1')
        cmd = [args.hvdrun, '-np', str(np), '--min-np', '1', '--host-discovery-script', disc,
               args.python, args.script, self.dir]
        self.lines = []  # (t, worker id or '', text)
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def set_hosts(self, hosts):
        tmp = self.hosts_file + '.tmp'
        with open(tmp, 'w') as f:
            f.write('\n'.join(hosts) + '\n')
        os.rename(tmp, self.hosts_file)

    def _read(self):
        for raw in self.proc.stdout:
            t = time.monotonic()
            m = LINE.match(raw.rstrip('\n'))
            wid, text = (m.group(1), m.group(3)) if m else ('', raw.rstrip('\n'))
            with self.cond:
                self.lines.append((t, wid, text))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait(self, pred, timeout=120):
        """Waits until pred(lines) is true; returns its value."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred(self.lines)
                if v:
                    return v
                if self.proc.poll() is not None and not v:
                    raise RuntimeError('hvdrun exited %s:\n%s' % (self.proc.returncode, self.tail()))
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError('timed out:\n' + self.tail())
                self.cond.wait(min(left, 0.5))

    def tail(self, n=40):
        return '\n'.join('%s %s' % (w, x) for _, w, x in self.lines[-n:])

    def records(self, tag):
        out = []
        for t, wid, text in self.lines:
            if text.startswith(tag + ' ') or text.startswith(tag + ':'):
                f = dict(KV.findall(text))
                f['wid'], f['arrived'] = wid, t
                out.append(f)
        return out

    def traces(self, event, epoch):
        out = {}
        for t, wid, text in self.lines:
            if text.startswith('hvd: elastic trace: %s epoch=%d ' % (event, epoch)):
                out[wid] = float(dict(KV.findall(text))['t'])
        return out

    def entered(self, world, size):
        return len([r for r in self.records('ENTER') if r['world'] == str(world)]) == size

    def save_log(self, path):
        with open(path, 'w') as f:
            for t, wid, text in self.lines:
                f.write('%.6f [%s] %s\n' % (t, wid, text))

    def stop(self):
        open(os.path.join(self.dir, 'stop'), 'w').close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode


def commits_in(job, world):
    return max([int(r['commits']) for r in job.records('SAVE') if r['world'] == str(world)] or [0])


def kill_trial(args, log):
    job = Job(args, ['localhost:2', '127.0.0.1:1', '127.0.0.2:1'], 4)
    try:
        job.wait(lambda ls: job.entered(0, 4))
        job.wait(lambda ls: commits_in(job, 0) >= 20)
        time.sleep(0.3)
        pid = int([r for r in job.records('ENTER') if r['wid'] == '127.0.0.2:0'][-1]['pid'])
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        job.wait(lambda ls: len([r for r in job.records('STEP') if r['world'] == '1']) == 3)
        survivors = ['localhost:0', 'localhost:1', '127.0.0.1:0']
        fault = {r['wid']: float(r['t']) for r in job.records('FAULT') if r['world'] == '0'}
        init, assigned, world = job.traces('init', 1), job.traces('assigned', 1), job.traces('world', 1)
        synced = {r['wid']: float(r['synced']) for r in job.records('ENTER') if r['world'] == '1'}
        step = {r['wid']: float(r['t']) for r in job.records('STEP') if r['world'] == '1'}
        exited = [t for t, w, x in job.lines if w == '' and 'worker 127.0.0.2:0' in x and 'exited' in x]
        published = [t for t, w, x in job.lines if w == '' and x.startswith('hvdrun: elastic: world 1:')]
        ev = {'detect': max(fault[w] for w in survivors), 'restore': max(init[w] for w in survivors),
              'assign': max(assigned[w] for w in survivors), 'rendezvous': max(world[w] for w in survivors),
              'sync': max(synced[w] for w in survivors), 'step': max(step[w] for w in survivors)}
        res = {k: v - t0 for k, v in ev.items()}
        res['driver_saw_exit'] = exited[0] - t0 if exited else None
        res['driver_published'] = published[0] - t0 if published else None
        res['first_detect'] = min(fault[w] for w in survivors) - t0
        code = job.stop()
        job.save_log(log)
        if code != 0:
            raise RuntimeError('job exited %d:\n%s' % (code, job.tail()))
        return res
    finally:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
        shutil.rmtree(job.dir, ignore_errors=True)


def grow_trial(args, log):
    job = Job(args, ['localhost:2', '127.0.0.1:1'], 3)
    try:
        job.wait(lambda ls: job.entered(0, 3))
        job.wait(lambda ls: commits_in(job, 0) >= 20)
        t0 = time.monotonic()
        job.set_hosts(['localhost:2', '127.0.0.1:1', '127.0.0.2:1'])
        job.wait(lambda ls: len([r for r in job.records('STEP') if r['world'] == '1']) == 4)
        new = '127.0.0.2:0'
        published = [t for t, w, x in job.lines if w == '' and x.startswith('hvdrun: elastic: world 1:')]
        boot = [float(r['t']) for r in job.records('BOOT') if r['wid'] == new]
        init, world = job.traces('init', 1), job.traces('world', 1)
        synced = {r['wid']: float(r['synced']) for r in job.records('ENTER') if r['world'] == '1'}
        step = {r['wid']: float(r['t']) for r in job.records('STEP') if r['world'] == '1'}
        olds = [w for w in step if w != new]
        res = {'published': published[0] - t0, 'new_boot': boot[0] - t0, 'new_init': init[new] - t0,
               'survivors_interrupted': max(init[w] for w in olds) - t0,
               'rendezvous': max(world.values()) - t0, 'sync': max(synced.values()) - t0,
               'step': max(step.values()) - t0}
        code = job.stop()
        job.save_log(log)
        if code != 0:
            raise RuntimeError('job exited %d:\n%s' % (code, job.tail()))
        return res
    finally:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
        shutil.rmtree(job.dir, ignore_errors=True)


def table(title, rows, order, notes, chain):
    print('\n%s (%d trials; seconds from the event, median [min, max])\n' % (title, len(rows)))
    print('| phase ends when | median | min | max | phase alone (median) |')
    print('|---|---|---|---|---|')
    prev = None
    for k in order:
        vals = [r[k] for r in rows if r.get(k) is not None]
        if not vals:
            continue
        alone = ''
        if k in chain:
            alone = '%.3f' % statistics.median([r[k] - (r[prev] if prev else 0) for r in rows])
            prev = k
        print('| %s: %s | %.3f | %.3f | %.3f | %s |' % (k, notes[k], statistics.median(vals), min(vals), max(vals), alone))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--hvdrun', required=True)
    ap.add_argument('--pythonpath', required=True)
    ap.add_argument('--script', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--trials', type=int, default=5)
    ap.add_argument('--python', default='/usr/bin/python3', help='the workers\' Python (with torch)')
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    kills, grows = [], []
    for i in range(args.trials):
        kills.append(kill_trial(args, os.path.join(args.out, 'kill-%d.log' % i)))
        print('kill trial %d: %s' % (i, json.dumps({k: round(v, 4) for k, v in kills[-1].items()})), flush=True)
        grows.append(grow_trial(args, os.path.join(args.out, 'grow-%d.log' % i)))
        print('grow trial %d: %s' % (i, json.dumps({k: round(v, 4) for k, v in grows[-1].items()})), flush=True)
    with open(os.path.join(args.out, 'kill.json'), 'w') as f:
        json.dump(kills, f, indent=1)
    with open(os.path.join(args.out, 'grow.json'), 'w') as f:
        json.dump(grows, f, indent=1)
    table('kill -9 of rank 3 at np = 4 -> first step of the world of 3', kills,
          ['first_detect', 'detect', 'driver_saw_exit', 'driver_published', 'restore', 'assign', 'rendezvous', 'sync', 'step'],
          {'first_detect': 'the first survivor fails', 'detect': 'every survivor failed',
           'driver_saw_exit': 'hvdrun reports the exit', 'driver_published': 'hvdrun publishes world 1',
           'restore': 'restored, old world shut, init called', 'assign': 'assignment read',
           'rendezvous': 'new world up (rendezvous + communicators + sets)', 'sync': 'state synced from rank 0',
           'step': 'first step of the new world done'},
          ['detect', 'restore', 'assign', 'rendezvous', 'sync', 'step'])
    table('a host added (3 -> 4 workers) -> first step of the world of 4', grows,
          ['published', 'new_boot', 'survivors_interrupted', 'new_init', 'rendezvous', 'sync', 'step'],
          {'published': 'hvdrun publishes world 1 (discovery poll)', 'new_boot': 'the new process runs Python',
           'survivors_interrupted': 'survivors left world 0 at a commit', 'new_init': 'the new process calls init (torch imported)',
           'rendezvous': 'world of 4 up', 'sync': 'state synced', 'step': 'first step of the world of 4 done'},
          ['published', 'new_boot', 'new_init', 'rendezvous', 'sync', 'step'])


if __name__ == '__main__':
    main()
