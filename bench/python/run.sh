#!/usr/bin/env bash
# hvd.torch benchmarks (docs/python.md). Run alone: the machine's cores are
# the ranks'. Needs `make build python` first (make bench-python does it).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
export PYTHONPATH=build/python
NP=${NP:-2}
go build -o bin/ ./bench/python/goallreduce
echo "## step time: hvd.torch DistributedOptimizer vs torch DDP (gloo), np=$NP"
for h in 64 1024; do
  bin/hvdrun -np "$NP" $PY bench/python/step_time.py --hidden "$h" | sed -n 's/^\[0\]<stdout>://p'
done
echo "## allreduce (Sum, float32, in place) through the Python API and the Go SDK, np=$NP"
bin/hvdrun -np "$NP" $PY bench/python/allreduce_sweep.py | sed -n 's/^\[0\]<stdout>://p'
bin/hvdrun -np "$NP" bin/goallreduce | sed -n 's/^\[0\]<stdout>://p'
