#!/usr/bin/env bash
# The compute floor of the 1.07 M step at np 2: the same model with no
# communication ("local"), hvd and DDP in the same processes
# (step_phases.py), P passes. Usage: floor_1m.sh [passes]
set -euo pipefail
cd "$(dirname "$0")/../../.."
for p in $(seq 1 "${1:-2}"); do
  echo "== pass $p  $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=build/python:bench/python bin/hvdrun -np 2 /usr/bin/python3 bench/python/step_phases.py --hidden 1024 \
    --steps 40 --rounds 3 | sed -n 's/^\[0\]<stdout>://p'
done
