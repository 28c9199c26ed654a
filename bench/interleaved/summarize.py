#!/usr/bin/env python3
"""Median per (op, size, system) over the passes of run.sh's JSON files, with
every pass's value, and each system's ratio against Open MPI (mpi-shm time /
system time: > 1 is faster than Open MPI). Usage: summarize.py DIR"""
import collections, glob, json, os, statistics, sys

d = sys.argv[1]
rows = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
    try:
        data = json.load(open(f))
    except (OSError, ValueError):
        continue
    if isinstance(data, dict):
        data = data.get("rows", [data])
    for r in data:
        if isinstance(r, dict) and "op" in r and "time_us" in r:
            rows[(r["op"], r["bytes"], r["system"])].append((r["time_us"], r.get("wrong", 0)))

def fmt(us):
    return "%.2f µs" % us if us < 1000 else "%.2f ms" % (us / 1000)

print("| op | size | system | median | passes | vs mpi-shm |")
print("|---|---|---|---|---|---|")
for op, size in sorted({(k[0], k[1]) for k in rows}):
    mpi = rows.get((op, size, "mpi-shm"))
    mpi_med = statistics.median(t for t, _ in mpi) if mpi else None
    for sysname in sorted(s for o, b, s in rows if (o, b) == (op, size)):
        v = rows[(op, size, sysname)]
        med = statistics.median(t for t, _ in v)
        wrong = sum(w for _, w in v)
        ratio = "%.2f×" % (mpi_med / med) if mpi_med else "—"
        print("| %s | %d | %s | %s | %s | %s |%s" % (op, size, sysname, fmt(med), " / ".join(fmt(t) for t, _ in v), ratio,
              " WRONG=%d" % wrong if wrong else ""))
