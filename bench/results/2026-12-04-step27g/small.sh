#!/usr/bin/env bash
# The issue's small-op rows on this machine, bound and not, PASSES times:
# hvdbench engine (Go SDK: named 8 B, 200 x 4 KiB batch) and
# bench/python/latency.py (hvd.torch). Run alone, after make build python.
set -euo pipefail
cd "$(dirname "$0")/../../.."
for p in $(seq 1 "${1:-2}"); do
  for bind in core none; do
    echo "== small pass $p  bind $bind  $(cut -d' ' -f1-3 /proc/loadavg)"
    bin/hvdrun -np 2 --bind-to $bind bin/hvdbench engine | sed -n 's/^\[0\]<stdout>://p' | grep -E "^  engine (allreduce 8 B \(named\)|200 x)"
    PYTHONPATH=build/python bin/hvdrun -np 2 --bind-to $bind /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
  done
done
