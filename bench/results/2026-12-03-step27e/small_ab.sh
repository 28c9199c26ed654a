#!/usr/bin/env bash
# Issue 27, fifth session: the small-op rows (hvdbench engine: the Go SDK;
# bench/python/latency.py: hvd.torch), np 2, not bound and bound
# (--bind-to core), alternating three builds/settings per pass:
#   before  a worktree at c905f0b (BEFORE_DIR, built with make python and
#           go build ./cmd/hvdrun ./cmd/hvdbench)
#   noball  this build with HVD_GC_BALLAST_MB=0 (no ballast: the synchronize
#           fix and, from small_ab2.txt on, the engine's garbage cut)
#   after   this build (synchronize through the C path, reaping the
#           batch's finished ops; the collector ballast, default size)
# Usage: small_ab.sh BEFORE_DIR [passes]
# (small_ab.txt: the first build of this session, ballast 32 MiB, before the
# engine garbage cut; small_ab2.txt: with the cut, ballast 32 MiB;
# small_ab3.txt: the final build, ballast 8 MiB.)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
before=${1:?worktree of the build before}; passes=${2:-2}
cd "$root"
for p in $(seq 1 "$passes"); do
  for bind in none core; do
    for b in before noball after; do
      dir=$root; env=()
      [ $b = before ] && dir=$before
      [ $b = noball ] && env=(HVD_GC_BALLAST_MB=0)
      echo "== pass $p  bind $bind  build $b  $(cut -d' ' -f1-3 /proc/loadavg)"
      env "${env[@]}" "$dir/bin/hvdrun" -np 2 --bind-to $bind "$dir/bin/hvdbench" engine | sed -n 's/^\[0\]<stdout>://p' | grep -E "^  engine (allreduce 8 B \(named\)|200 x)"
      env "${env[@]}" PYTHONPATH=$dir/build/python "$dir/bin/hvdrun" -np 2 --bind-to $bind /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p' | grep -v "^#"
    done
  done
done
