#!/usr/bin/env bash
cd /work/main
HVD_CALLER_ROUNDS=1 PYTHONPATH=build/python bin/hvdrun -np 2 /tmp/prof/wrap2.sh bench/python/step_csw.py --steps 300 2>&1 | grep "step med"
