#!/usr/bin/env bash
# latency.py only: base (606aa8e) vs new (HEAD default), 4 passes alternating
set -u
for p in 1 2 3 4; do
  for v in base new; do
    out=/tmp/eng-$v
    echo "== pass $p $v $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=$out/python $out/bin/hvdrun -np 2 /usr/bin/python3 /work/main/bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p'
  done
done
