#!/usr/bin/env python3
"""Pipeline bubble from train.py --profile files (bench/pipeline/run.sh).

For every schedule and micro-batch count M, over all passes and steps but
the first two of each run:
  step     T: the step's wall time, the slowest rank's;
  compute  C: the bottleneck stage's compute in the step (forward, loss,
              backward of its M micro-batches), the largest over ranks;
  waits    W: that rank's time blocked on transfers (receives whose sender
              has not sent yet, and sends at the end of the step);
  ideal    C·(M+P−1)/M: a pipeline whose P stages each take C/M per
              micro-batch and never wait otherwise (GPipe's and 1F1B's
              model), whose idle fraction is (P−1)/(M+P−1);
  measured idle fraction 1 − C/T, and T / ideal.
Medians over steps and passes. Standard library only.

  bench/pipeline/analyze.py RESULTS_DIR
"""
import glob
import json
import os
import re
import statistics
import sys


def main():
    d = sys.argv[1]
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "profile_*.json"))):
        m = re.match(r"profile_(\w+?)_m(\d+)_p(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            prof = json.load(f)
        runs.setdefault((m.group(1), int(m.group(2))), []).append(prof)
    if not runs:
        sys.exit("analyze.py: no profile_*.json in %s" % d)
    print("| schedule | M | ideal idle (P−1)/(M+P−1) | measured idle 1−C/T | step T (ms) | bottleneck compute C (ms) | waits W (ms) | ideal step C·(M+P−1)/M (ms) | T / ideal | runs × steps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (sched, mb) in sorted(runs, key=lambda k: (k[0] != "gpipe", k[1])):
        ts, cs, ws = [], [], []
        p = None
        for prof in runs[(sched, mb)]:
            p = prof["stages"]
            ranks = prof["ranks"]
            steps = len(ranks[0]["timings"])
            for s in range(2 if steps > 4 else 0, steps):
                wall = max(r["timings"][s][0] for r in ranks)
                bott = max(ranks, key=lambda r: r["timings"][s][1])
                ts.append(wall)
                cs.append(bott["timings"][s][1])
                ws.append(bott["timings"][s][2])
        t, c, w = statistics.median(ts), statistics.median(cs), statistics.median(ws)
        ideal_idle = (p - 1) / (mb + p - 1)
        ideal_step = c * (mb + p - 1) / mb
        print("| %s | %d | %.1f %% | %.1f %% | %.1f | %.1f | %.1f | %.1f | %.2f | %d × %d |" % (
            sched, mb, 100 * ideal_idle, 100 * (1 - c / t), 1e3 * t, 1e3 * c, 1e3 * w, 1e3 * ideal_step,
            t / ideal_step, len(runs[(sched, mb)]), len(ts) // len(runs[(sched, mb)])))


if __name__ == "__main__":
    main()
