#!/usr/bin/env bash
cd /work/main
for i in 1 2; do
  TAG=raw_k1_$i HVD_CALLER_ROUNDS=1 PYTHONPATH=/tmp/raw/python /tmp/raw/bin/hvdrun -np 2 /tmp/prof/wrap.sh bench/python/step_csw.py --steps 1000 2>&1 | grep "step med" | sed "s/^/raw k=1 /"
done
