#!/usr/bin/env bash
# Issue 27, sixth session: the build before (BEFORE_DIR, a worktree built
# with make python and go build ./cmd/hvdrun ./cmd/hvdbench) against this
# build, alternating, np 2, bound (--bind-to core) and not bound:
#   step   bench/python/step_phases.py --hidden 64 (5.5 k): local, hvd and
#          DDP in the same processes; phases and step quantiles (rank 0)
#   small  hvdbench engine (Go SDK: named 8 B, 200 x 4 KiB batch) and
#          bench/python/latency.py (hvd.torch)
#   sweep  bench/python/allreduce_sweep.py (hvd.torch, 8 B to 64 MiB)
#   big    step_phases.py --hidden 1024 (1.07 M), not bound only
# Usage: step_small_ab.sh BEFORE_DIR [passes] [what: step,small,sweep,big]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
before=${1:?worktree of the build before}; passes=${2:-2}; what=${3:-step,small}
cd "$root"
for p in $(seq 1 "$passes"); do
  for bind in core none; do
    for b in before after; do
      dir=$root
      [ $b = before ] && dir=$before
      if [[ $what == *step* ]]; then
        echo "== step pass $p  bind $bind  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
        PYTHONPATH=$dir/build/python:$root/bench/python "$dir/bin/hvdrun" -np 2 --bind-to $bind /usr/bin/python3 bench/python/step_phases.py --hidden 64 --quantiles | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
      fi
      if [[ $what == *small* ]]; then
        echo "== small pass $p  bind $bind  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
        "$dir/bin/hvdrun" -np 2 --bind-to $bind "$dir/bin/hvdbench" engine | sed -n 's/^\[0\]<stdout>://p' | grep -E "^  engine (allreduce 8 B \(named\)|200 x)"
        PYTHONPATH=$dir/build/python "$dir/bin/hvdrun" -np 2 --bind-to $bind /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
      fi
      if [[ $what == *sweep* ]]; then
        echo "== sweep pass $p  bind $bind  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
        PYTHONPATH=$dir/build/python "$dir/bin/hvdrun" -np 2 --bind-to $bind /usr/bin/python3 bench/python/allreduce_sweep.py | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
      fi
      if [[ $what == *big* && $bind == none ]]; then
        echo "== big pass $p  bind $bind  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
        PYTHONPATH=$dir/build/python:$root/bench/python "$dir/bin/hvdrun" -np 2 --bind-to $bind /usr/bin/python3 bench/python/step_phases.py --hidden 1024 --steps 50 --rounds 3 | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
      fi
    done
  done
done
