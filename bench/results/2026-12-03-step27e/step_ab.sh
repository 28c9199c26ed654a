#!/usr/bin/env bash
# The 5.5 k step (bench/python/step_phases.py --hidden 64), np 2, the build
# before (BEFORE: worktree at c905f0b) alternating with this one: the
# bucketed default, per-hook launches (bucket_bytes=0, which take the
# per-op fast path) and DDP in the same processes. Usage: step_ab.sh BEFORE_DIR [passes]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
before=${1:?worktree of the build before}; passes=${2:-2}
cd "$root"
for p in $(seq 1 "$passes"); do
  for b in before after; do
    if [ $b = before ]; then dir=$before; else dir=$root; fi
    echo "== pass $p  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=$dir/build/python:bench/python "$dir/bin/hvdrun" -np 2 /usr/bin/python3 bench/python/step_phases.py \
      --hidden 64 --kinds local,hvd,hvd:0,ddp | sed -n 's/^\[0\]<stdout>://p'
  done
done
