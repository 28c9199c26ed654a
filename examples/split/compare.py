#!/usr/bin/env python3
"""Compares two train.py --dump results (the pipelined job and its
single-process reference): every parameter and every step's loss, by the
largest relative difference. Exits 1 above --rtol (default 1e-5).

  python3 compare.py pipe.npz ref.npz
"""
import argparse
import json
import sys

import numpy as np


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-30))) if a.size else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pipeline")
    p.add_argument("reference")
    p.add_argument("--rtol", type=float, default=1e-5)
    a = p.parse_args()
    got, want = np.load(a.pipeline), np.load(a.reference)
    if sorted(got.files) != sorted(want.files):
        sys.exit("different parameters: %s vs %s" % (sorted(got.files), sorted(want.files)))
    worst = max(rel(got[k], want[k]) for k in want.files)
    with open(a.pipeline[:-4] + ".json") as f1, open(a.reference[:-4] + ".json") as f2:
        lg, lw = json.load(f1)["losses"], json.load(f2)["losses"]
    loss = rel(lg, lw) if len(lg) == len(lw) else float("inf")
    print("%d parameters, %d steps: largest relative difference %.3g (parameters), %.3g (losses); final loss %.6f"
          % (len(want.files), len(lw), worst, loss, lg[-1]))
    if worst > a.rtol or loss > a.rtol:
        sys.exit("pipeline and reference differ by more than %g" % a.rtol)
    print("the pipelined job matches the single-process reference (rtol %g)" % a.rtol)


if __name__ == "__main__":
    main()
