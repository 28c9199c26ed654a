#!/usr/bin/env bash
# Issue 27, seventh session: step_phases.py (5.5 k; local, hvd, DDP in the same processes),
# bound np 2, under env configurations, alternating. Usage: step_phases_probe.sh PASSES "A=1" "B=2" ...
cd "$(dirname "$0")/../../.."
passes=$1; shift
for p in $(seq 1 $passes); do
  for c in "$@"; do
    echo "== pass $p cfg [$c] bind ${BIND:-core} $(cut -d' ' -f1-3 /proc/loadavg)"
    env $c PYTHONPATH=build/python:bench/python bin/hvdrun -np 2 --bind-to ${BIND:-core} /usr/bin/python3 bench/python/step_phases.py --hidden 64 --quantiles | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
  done
done
