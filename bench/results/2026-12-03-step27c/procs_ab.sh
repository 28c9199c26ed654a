#!/usr/bin/env bash
# Issue 27, third session: libhvd's Go runtime sized by cmd/libhvd/procs.go
# ("new": GOMAXPROCS unset) against the runtime's default held fixed
# (GOMAXPROCS=2 on these 2 cores: what the build before ran), one build,
# alternating, hvd and DDP in the same processes (step_time.py). Run alone.
#   bench/results/2026-12-03-step27c/procs_ab.sh [ITER] [MODELS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
ITER=${1:-3}
MODELS=${2:-"64:2:200 64:3:200 1024:2:50 1024:3:50"}
export PYTHONPATH=build/python:bench/python
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ITER"); do
  for m in $MODELS; do
    IFS=: read -r h np steps <<<"$m"
    model=(--hidden "$h")
    [ "$h" = resnet18 ] && model=(--model resnet18 --batch 16)
    for cfg in GOMAXPROCS=2 new; do
      env=(); [ "$cfg" = new ] || env=("$cfg")
      line=$(env "${env[@]}" timeout 600 bin/hvdrun -np "$np" /usr/bin/python3 bench/python/step_time.py "${model[@]}" --steps "$steps" --rounds 3 2>&1 \
        | sed -n 's/^\[0\]<stdout>://p' | grep -E "^(hvd|ddp) median|ratio hvd/ddp" | tr '\n' '|')
      echo "iter $i model $h np $np $cfg: $line"
    done
  done
done
