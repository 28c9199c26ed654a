"""Runs a generated PyTorch split job in one process against fakehvd (ranks are threads) and
compares it with the job's own single-process reference.

    simulate.py DIR --np N [--launched N] [--expect-error TEXT] [-- train.py arguments]
    simulate.py --many CASES.json
    simulate.py --selftest

Prints one JSON line: {"ok": ..., "max_rel_param": ..., "max_rel_loss": ..., ...}; exits 0
when the run completed and matched (or failed with TEXT when --expect-error is given).
--many runs a JSON list of cases ({"name", "dir", "np", "launched", "expect_error", "train"})
in this one process (torch is imported once) and prints one line per case, with its name.
--selftest checks that the fake itself catches what it claims to: a deadlock, a tag mismatch,
a send that completes before its receive is posted, a wrong gradient count.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fakehvd  # noqa: E402
import compare  # noqa: E402


def install_fake():
    pkg = types.ModuleType("hvd")
    pkg.__path__ = []
    pkg.torch = fakehvd
    sys.modules["hvd"] = pkg
    sys.modules["hvd.torch"] = fakehvd


def run_ranks(world, fn, n):
    """Runs fn(rank) on n threads; returns {rank: error text} for the ranks that raised."""
    errors = {}

    def body(r):
        fakehvd.set_rank(world, r)
        try:
            fn(r)
        except BaseException as e:  # SystemExit included: train.py exits with a message
            errors[r] = "%s: %s" % (type(e).__name__, e)
            if not isinstance(e, (SystemExit, fakehvd.FakeError)):
                errors[r] += "\n" + traceback.format_exc()
            world.fail("rank %d failed: %s" % (r, e))

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(world.timeout * 3)
        if t.is_alive():
            errors.setdefault(-1, "a rank thread is still running after %.0f s" % (world.timeout * 3))
    return errors


GENERATED = ("model", "train", "pipeline", "topology")


def simulate(args):
    install_fake()
    # A fresh import of this directory's generated modules.
    for name in GENERATED:
        sys.modules.pop(name, None)
    sys.path.insert(0, os.path.abspath(args.dir))
    try:
        return _simulate(args)
    finally:
        sys.path.remove(os.path.abspath(args.dir))
        os.environ.pop("HOROVOD_SIZE", None)


def _simulate(args):
    import model as model_def  # noqa: the generated model.py
    import train  # the generated train.py

    # torch.manual_seed is process-wide: while one thread seeds and builds its layers no other
    # may, or they would draw from each other's streams. (Separate processes need no lock.)
    build_lock = threading.Lock()
    build_layers = model_def.build_layers

    def locked_build_layers(*a, **k):
        with build_lock:
            return build_layers(*a, **k)

    model_def.build_layers = locked_build_layers

    out = {"ok": False}
    with tempfile.TemporaryDirectory() as tmp:
        ref, run = os.path.join(tmp, "ref.npz"), os.path.join(tmp, "run.npz")
        world = fakehvd.World(args.np, timeout=args.timeout)
        if args.launched is not None:
            os.environ["HOROVOD_SIZE"] = str(args.launched)
        errors = run_ranks(world, lambda r: train.main(args.train + ["--dump", run]), args.np)
        out["stats"] = dict(world.stats)
        if errors:
            out["errors"] = {str(k): v for k, v in sorted(errors.items())}
            if args.expect_error:
                out["ok"] = all(args.expect_error in v for v in errors.values())
            return out
        if args.expect_error:
            out["errors"] = {"-": "the run succeeded, expected an error containing %r" % args.expect_error}
            return out
        train.main(args.train + ["--reference", "--dump", ref])
        out.update(compare.compare(run, ref, args.rtol))
        return out


def selftest(args):
    install_fake()
    import torch
    results = {}

    def expect(name, n, fn, text):
        world = fakehvd.World(n, timeout=0.5)
        errors = run_ranks(world, fn, n)
        ok = bool(errors) and any(text in e for e in errors.values())
        results[name] = {"ok": ok, "errors": {str(k): v.splitlines()[0] for k, v in errors.items()}}

    def init():
        fakehvd.init(process_sets=[])

    def recv_recv(r):  # both ranks wait to receive first: a deadlock
        init()
        buf = torch.zeros(3)
        fakehvd.synchronize(fakehvd.irecv(buf, 1 - r))
        fakehvd.synchronize(fakehvd.isend(torch.ones(3), 1 - r))

    def send_send(r):  # both wait for their sends first: rendezvous makes this a deadlock too
        init()
        fakehvd.synchronize(fakehvd.isend(torch.ones(3), 1 - r))
        fakehvd.synchronize(fakehvd.irecv(torch.zeros(3), 1 - r))

    def tags(r):
        init()
        if r == 0:
            fakehvd.synchronize(fakehvd.isend(torch.ones(3), 1, tag=1))
        else:
            fakehvd.synchronize(fakehvd.irecv(torch.zeros(3), 0, tag=2))

    def changed(r):
        init()
        if r == 0:
            t = torch.ones(3)
            h = fakehvd.isend(t, 1)
            t.add_(1)
            fakehvd.synchronize(h)
        else:
            import time
            time.sleep(0.2)
            fakehvd.synchronize(fakehvd.irecv(torch.zeros(3), 0))

    def grads(r):
        init()
        p = torch.nn.Parameter(torch.ones(2))
        opt = fakehvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), named_parameters=[("p", p)],
                                           backward_passes_per_step=2)
        (p * 2).sum().backward()
        opt.step()

    def fine(r):  # the control: a correct exchange passes and delivers the data
        init()
        buf = torch.zeros(3)
        h = fakehvd.irecv(buf, 1 - r)
        s = fakehvd.isend(torch.full((3,), float(r)), 1 - r)
        fakehvd.synchronize(h)
        fakehvd.synchronize(s)
        if buf.tolist() != [float(1 - r)] * 3:
            raise AssertionError("got %s" % buf.tolist())

    expect("deadlock recv-recv", 2, recv_recv, "deadlock")
    expect("deadlock send-send", 2, send_send, "deadlock")
    expect("tag mismatch", 2, tags, "tag mismatch")
    expect("buffer changed", 2, changed, "changed the buffer")
    expect("gradient count", 1, grads, "got 1 gradients this step, but backward_passes_per_step is 2")
    world = fakehvd.World(2, timeout=0.5)
    errors = run_ranks(world, fine, 2)
    results["control"] = {"ok": not errors, "errors": errors}
    return {"ok": all(r["ok"] for r in results.values()), "selftest": results}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir", nargs="?")
    p.add_argument("--np", type=int)
    p.add_argument("--launched", type=int, help="HOROVOD_SIZE to announce (default: none)")
    p.add_argument("--expect-error")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--timeout", type=float, default=fakehvd.TIMEOUT)
    p.add_argument("--selftest", action="store_true")
    p.add_argument("--many", metavar="CASES.json")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.train = argv[cut + 1:]
    if args.many:
        with open(args.many) as f:
            many = json.load(f)
        ok = True
        for c in many:
            one = argparse.Namespace(dir=c["dir"], np=c["np"], launched=c.get("launched"),
                                     expect_error=c.get("expect_error"), rtol=args.rtol, timeout=args.timeout,
                                     train=c.get("train", []))
            try:
                out = simulate(one)
            except BaseException:
                out = {"ok": False, "errors": {"-": traceback.format_exc()}}
            out["name"] = c["name"]
            ok = ok and out["ok"]
            print(json.dumps(out, sort_keys=True), flush=True)
        sys.exit(0 if ok else 1)
    out = selftest(args) if args.selftest else simulate(args)
    print(json.dumps(out, sort_keys=True))
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
