#!/usr/bin/env bash
# The small-op rows of this build (hvdbench engine, latency.py), np 2, not
# bound and bound, with HVD_GC_BALLAST_MB 0, 8 and 32 alternating, P passes.
# Usage: ballast_sweep.sh [passes]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
passes=${1:-2}
cd "$root"
for p in $(seq 1 "$passes"); do
  for bind in none core; do
    for mb in 0 8 32; do
      echo "== pass $p  bind $bind  HVD_GC_BALLAST_MB=$mb  $(cut -d' ' -f1-3 /proc/loadavg)"
      HVD_GC_BALLAST_MB=$mb bin/hvdrun -np 2 --bind-to $bind bin/hvdbench engine | sed -n 's/^\[0\]<stdout>://p' | grep -E "^  engine (allreduce 8 B \(named\)|200 x)"
      HVD_GC_BALLAST_MB=$mb PYTHONPATH=build/python bin/hvdrun -np 2 --bind-to $bind /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
    done
  done
done
