#!/bin/bash
# alternate two builds (issue 18: bench/results/2026-12-01-engine18b): hvdbench engine + latency.py, np $NP, $1 passes
for p in $(seq 1 $1); do
  for v in $A $B; do
    echo "== $v np$NP pass $p load $(cut -d' ' -f1 /proc/loadavg)"
    /tmp/eb/$v/hvdrun -np $NP /tmp/eb/$v/hvdbench engine 2>&1 | sed -n 's/^\[0\]<stdout>://p' | grep -E "^  engine (allreduce 8 B|200)"
    PYTHONPATH=/tmp/eb/$v/python /tmp/eb/$v/hvdrun -np $NP /usr/bin/python3 /tmp/eb/latency_new.py 2>&1 | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
  done
done
