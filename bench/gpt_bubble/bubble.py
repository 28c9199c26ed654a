#!/usr/bin/env python3
"""The pipeline bubble of the generated GPT job, measured against the schedule's theory.

Runs the job of each hvd.yaml variant under hvdrun (2 pipeline stages = 2 processes on a 2-core
machine, so the stages do not compete for a core) with --profile, and reports per variant:

  step      median wall time of a step (steps after the first two)
  compute   median time a rank spends computing (forward, loss, backward) per step
  bubble    1 - compute / step, averaged over the ranks: the fraction of a step a rank idles
  theory    (P - 1) / (M + P - 1), divided by V when interleaved (equal chunks, free transfers)

    flock /tmp/hvd-bench.lock bench/gpt_bubble/bubble.py
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PY = os.environ.get("PYTHON", "/usr/bin/python3")

SPEC = """version: 1
project: bubble
framework: pytorch
generate: [split]
model:
  gpt: {{vocab: 256, seq_len: 64, hidden: 256, heads: 4, blocks: 8}}
parallel: {{stages: 2, micro_batches: {m}, schedule: 1f1b, virtual_stages: {v}}}
"""


def run(m, v, steps, rows):
    with tempfile.TemporaryDirectory() as d:
        spec = os.path.join(d, "hvd.yaml")
        with open(spec, "w") as f:
            f.write(SPEC.format(m=m, v=v))
        out = os.path.join(d, "job")
        subprocess.run([os.path.join(REPO, "bin", "hvdgen"), "generate", "-f", spec, "--plugin-dir",
                        os.path.join(REPO, "bin"), "--python", PY, "--out", out], check=True, capture_output=True)
        prof = os.path.join(d, "profile.json")
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "build", "python"), OMP_NUM_THREADS="1")
        subprocess.run([os.path.join(REPO, "bin", "hvdrun"), "-np", "2", PY, os.path.join(out, "train.py"),
                        "--steps", str(steps), "--batch-size", str(rows * m), "--profile", prof],
                       check=True, capture_output=True, env=env)
        with open(prof) as f:
            p = json.load(f)
    walls, computes, bubbles = [], [], []
    for r in p["ranks"]:
        t = r["timings"][2:]
        walls.append(statistics.median(w for w, _, _ in t))
        computes.append(statistics.median(c for _, c, _ in t))
        bubbles.append(statistics.median(1 - c / w for w, c, _ in t))
    P = 2
    theory = (P - 1) / (m + P - 1) / v
    return max(walls), statistics.mean(computes), statistics.mean(bubbles), theory


def main():
    steps = int(os.environ.get("STEPS", "8"))
    rows = int(os.environ.get("ROWS", "2"))
    print("| P | V | M | step (ms) | compute per rank (ms) | bubble measured | theory | measured / theory |")
    print("|---|---|---|---|---|---|---|---|")
    for m, v in [(2, 1), (4, 1), (8, 1), (4, 2), (8, 2)]:
        wall, comp, bubble, theory = run(m, v, steps, rows)
        print("| 2 | %d | %d | %.1f | %.1f | %.3f | %.3f | %.2f |" % (v, m, wall * 1e3, comp * 1e3, bubble, theory,
                                                                   bubble / theory), flush=True)


if __name__ == "__main__":
    sys.exit(main())
