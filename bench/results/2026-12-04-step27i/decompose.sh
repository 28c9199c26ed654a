#!/usr/bin/env bash
# Where hvd.torch's 200 x 4 KiB batch spends what the Go SDK's does not
# (issue 27, ninth session). Run alone after make build python, from the
# repository root: bench/results/2026-12-04-step27i/decompose.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=bench/results/2026-12-04-step27i
export PYTHONPATH=build/python
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores $(lscpu | sed -n 's/^Model name: *//p')"
echo "## 1. one rank, in process, no Python, no cgo (go test -bench EnqueueBatch ./cmd/libhvd)"
go test -c -o /tmp/libhvd.test ./cmd/libhvd
for i in 1 2 3; do
  for b in 'CEnqueueBatch$' 'CEnqueueBatchLockedThread$' 'GoEnqueueBatch$'; do
    /tmp/libhvd.test -test.run XXX -test.bench "$b" -test.benchtime 3000x 2>&1 | grep '^Benchmark'
  done
done
echo "## 2. one rank, hvd.torch batch loop (batch_n.py 3000), GOMAXPROCS 1 (libhvd's) and 2, alternated; perf stat"
for i in 1 2 3; do
  for g in 1 2; do
    printf 'GOMAXPROCS=%s ' "$g"
    GOMAXPROCS=$g perf stat -x, -e task-clock,context-switches /usr/bin/python3 $D/batch_n.py 3000 2>/tmp/ps.txt | tr '\n' ' '
    awk -F, '{printf "%s=%s ", $3, $1} END {print ""}' /tmp/ps.txt
  done
done
echo "## 3. Python alone: the interpreter's floor (python_floor.py: the batch's loops calling a no-op C function) and the C entries with the library stubbed (step27h/pcost.py)"
cc -O2 -shared -fPIC bench/results/2026-12-04-step27h/stub.c -o /tmp/libstub.so
for i in 1 2 3; do taskset -c 0 /usr/bin/python3 $D/python_floor.py; done
ROUNDS=5 taskset -c 0 /usr/bin/python3 bench/results/2026-12-04-step27h/pcost.py | grep -E "^#|reader on"
echo "## 4. np 2: Go SDK batch and hvd.torch batch alternated (step27h/pairs.sh 8)"
bash bench/results/2026-12-04-step27h/pairs.sh 8
