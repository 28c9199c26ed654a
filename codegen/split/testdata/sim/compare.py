"""Compares two --dump outputs of a generated split job (parameters .npz + losses .json).

    compare.py RUN.npz REF.npz [--rtol 1e-5]

Relative error of a parameter: max |run - ref| / max |ref| over its elements (the infinity-norm
relative error; 0 when both are all zero); of a loss: |run - ref| / |ref| per step. Prints one JSON
line and exits 0 when both stay within rtol, the same parameters (names and shapes) are present in
both, and both ran the same number of steps.
"""
import json
import sys

import numpy as np


def _json(path):
    with open((path[:-4] if path.endswith(".npz") else path) + ".json") as f:
        return json.load(f)


def compare(run, ref, rtol=1e-5):
    a, b = np.load(run), np.load(ref)
    out = {"ok": True, "params": len(b.files), "max_rel_param": 0.0, "worst_param": None}
    problems = []
    if sorted(a.files) != sorted(b.files):
        problems.append("parameters differ: run has %s, reference %s" % (sorted(a.files), sorted(b.files)))
    for name in sorted(set(a.files) & set(b.files)):
        x, y = a[name], b[name]
        if x.shape != y.shape:
            problems.append("%s: shape %s vs %s" % (name, x.shape, y.shape))
            continue
        scale = float(np.max(np.abs(y))) if y.size else 0.0
        diff = float(np.max(np.abs(x - y))) if y.size else 0.0
        rel = diff / scale if scale > 0 else diff
        if rel > out["max_rel_param"] or out["worst_param"] is None:
            out["max_rel_param"], out["worst_param"] = rel, name
    la, lb = _json(run)["losses"], _json(ref)["losses"]
    out["steps"] = len(lb)
    if len(la) != len(lb) or not lb:
        problems.append("losses: %d steps vs %d" % (len(la), len(lb)))
    rels = [abs(x - y) / abs(y) if y else abs(x) for x, y in zip(la, lb)]
    out["max_rel_loss"] = max(rels) if rels else 0.0
    out["first_loss"], out["last_loss"] = (lb[0], lb[-1]) if lb else (None, None)
    if out["max_rel_param"] > rtol:
        problems.append("parameter %s differs by %.3g relative (tolerance %g)" % (out["worst_param"], out["max_rel_param"], rtol))
    if out["max_rel_loss"] > rtol:
        problems.append("losses differ by %.3g relative (tolerance %g)" % (out["max_rel_loss"], rtol))
    out["ok"] = not problems
    if problems:
        out["problems"] = problems
    return out


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("run")
    p.add_argument("ref")
    p.add_argument("--rtol", type=float, default=1e-5)
    args = p.parse_args()
    res = compare(args.run, args.ref, args.rtol)
    print(json.dumps(res, sort_keys=True))
    sys.exit(0 if res["ok"] else 1)
