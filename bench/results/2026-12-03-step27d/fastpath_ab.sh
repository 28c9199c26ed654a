#!/usr/bin/env bash
# Issue 27, the C fast path of hvd.torch's per-op calls: the small-op rows
# (hvdbench engine: the Go SDK; bench/python/latency.py: hvd.torch), np 2,
# the build before (BEFORE: a worktree at a47bb46, built with make python
# and go build) and this one, not bound and bound (--bind-to core),
# alternating, P passes. Usage: fastpath_ab.sh BEFORE_DIR [passes]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
before=${1:?worktree of the build before}; passes=${2:-3}
cd "$root"
for p in $(seq 1 "$passes"); do
  for bind in none core; do
    for b in before after; do
      if [ $b = before ]; then dir=$before; else dir=$root; fi
      echo "== pass $p  bind $bind  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
      "$dir/bin/hvdrun" -np 2 --bind-to $bind "$dir/bin/hvdbench" engine | sed -n 's/^\[0\]<stdout>://p' | grep -E "8 B \(named\)|batch"
      PYTHONPATH=$dir/build/python "$dir/bin/hvdrun" -np 2 --bind-to $bind /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
    done
  done
done
