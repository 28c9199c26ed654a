#!/usr/bin/env bash
# Issue 27's step benchmark: hvd.torch's DistributedOptimizer, the same with
# bucket_bytes=0 (per-hook launches, as before), the step without
# communication (--local: the floor), torch DDP (gloo) and real
# Horovod 0.28.1 (gloo), on step_time.py's model at 5.5 k and 1.07 M
# parameters (np 2 and 3) and torchvision's ResNet-18 on 32x32 images, batch
# 16 (np 2; Horovod's synthetic-benchmark shape; python3-torchvision). hvd and DDP share processes (hvdrun); Horovod runs
# under its own horovodrun with DDP beside it, alternating with the hvd run,
# ROUNDS times; where hvdrun binds one rank per core (np <= cores: its
# default, --bind-to auto), Horovod runs a second time with its ranks bound
# alike (bench/horovod/bound.sh). hvd/Horovod is the ratio of the two runs' medians (and, as a
# check, of their ratios to the DDP in the same processes).
#
#   bench/python/step_vs_horovod.sh [ROUNDS]      (default 2; ~6 min at 2 on the
#   Intel VM, 21 min on the AMD EPYC one; MODELS="64 1024 resnet18" picks rows)
#
# Needs `make build python` and bench/horovod/venv.sh (built on first use,
# ~2 min). Run alone: the ranks use the cores. Never part of the tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-2}
PY=/usr/bin/python3
HPY=$(bench/horovod/venv.sh)
HRUN=$(dirname "$HPY")/horovodrun
export PYTHONPATH=build/python:bench/python
STEPS=${STEPS:-200}
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for h in ${MODELS:-64 1024 resnet18}; do
  steps=$STEPS nps="2 3" model=(--hidden "$h")
  [ "$h" = 1024 ] && steps=$((STEPS / 4))
  [ "$h" = resnet18 ] && steps=$((STEPS / 10)) nps=2 model=(--model resnet18 --batch 16)
  for np in $nps; do
    for r in $(seq "$ROUNDS"); do
      echo "== hidden $h np $np round $r: hvd"
      bin/hvdrun -np "$np" $PY bench/python/step_time.py "${model[@]}" --steps "$steps" --rounds 3 --per-tensor --local \
        | sed -n 's/^\[0\]<stdout>://p'
      echo "== hidden $h np $np round $r: horovod"
      PYTHONPATH=bench/python HVD_BENCH_DDP_PORT=29541 "$HRUN" --gloo -np "$np" -H "localhost:$np" \
        "$HPY" bench/python/step_time.py --impl horovod --local "${model[@]}" --steps "$steps" --rounds 3 2>&1 \
        | sed -n 's/^\[0\]<stdout>://p; s/^\[1,0\]<stdout>://p' | grep -v '^$'
      if [ "$np" -le "$(nproc)" ]; then
        # hvdrun binds one rank per core here (--bind-to auto); Horovod's
        # ranks bound the same way, as mpirun would bind them.
        echo "== hidden $h np $np round $r: horovod bound"
        PYTHONPATH=bench/python HVD_BENCH_DDP_PORT=29541 "$HRUN" --gloo -np "$np" -H "localhost:$np" \
          bench/horovod/bound.sh "$HPY" bench/python/step_time.py --impl horovod --local "${model[@]}" --steps "$steps" --rounds 3 2>&1 \
          | sed -n 's/^\[0\]<stdout>://p; s/^\[1,0\]<stdout>://p' | grep -v '^$'
      fi
    done
  done
done
