#!/usr/bin/env bash
cd /work/main
for k in 0 1 0 1; do
  TAG=k${k}_$RANDOM HVD_CALLER_ROUNDS=$k PYTHONPATH=build/python bin/hvdrun -np 2 /tmp/prof/wrap.sh bench/python/step_csw.py --steps 1000 2>&1 | grep "step med" | sed "s/^/k=$k /"
done
ls /tmp/prof/perf_*.txt
