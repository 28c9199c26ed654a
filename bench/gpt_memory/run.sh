#!/usr/bin/env bash
# Memory, enforced by the kernel (issue 25): the same GPT (hvd.yaml here, 69 M parameters,
# AdamW, float32) trained
#   1. in one process with no limit: its peak resident memory;
#   2. in one process under --memory-limit LIMIT MiB (RLIMIT_AS: the kernel refuses address space
#      beyond the process's start-up footprint + LIMIT): it must fail with an out-of-memory error;
#   3. split 2 x 2 x 2 (ZeRO-2) under hvdrun -np 8, every rank under the same limit: it must train,
#      with the loss falling, and print every rank's peak resident memory.
# Run alone (2 cores): flock /tmp/hvd-bench.lock bench/gpt_memory/run.sh   (~3 minutes)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/usr/bin/python3}
LIMIT=${LIMIT:-850}
STEPS=${STEPS:-4}
LR=${LR:-1e-3}
out=build/gpt-memory
make -s build python plugins >/dev/null
bin/hvdgen generate -f bench/gpt_memory/hvd.yaml --plugin-dir bin --python "$PY" --out "$PWD/$out" --np 8
# One malloc arena per process: glibc's per-thread arenas reserve 64 MiB of address space each,
# which RLIMIT_AS would count although nothing uses it.
export PYTHONPATH=$PWD/build/python OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=1
echo "== 1. one process, no limit"
"$PY" $out/train.py --reference --steps 2 --batch-size 4 --lr "$LR" --memory
echo "== 2. one process, --memory-limit $LIMIT MiB"
if "$PY" $out/train.py --reference --steps "$STEPS" --batch-size 4 --lr "$LR" --memory --memory-limit "$LIMIT"; then
  echo "FAIL: the single process trained under the limit"; exit 1
fi
echo "== 3. 2 tensor x 2 stages x 2 replicas (ZeRO-2), every rank under --memory-limit $LIMIT MiB"
bin/hvdrun -np 8 -x MALLOC_ARENA_MAX "$PY" $out/train.py --steps "$STEPS" --batch-size 4 --lr "$LR" --memory --memory-limit "$LIMIT"
