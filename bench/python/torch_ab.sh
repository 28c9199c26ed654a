#!/usr/bin/env bash
# Issue 18's hvd.torch rows, two builds interleaved pass by pass under the
# shared benchmark lock: bench/python/latency.py (the docs' rows) and
# bench/python/torch_phases.py (the 8 B op peeled layer by layer).
# A build is a directory holding an importable hvd package with its
# libhvd.so (e.g. made by: git worktree add /tmp/x REV && cd /tmp/x &&
# make python; then /tmp/x/build/python). ENV_B: extra environment for B.
# Usage: bench/python/torch_ab.sh OUTDIR DIR_A DIR_B [passes]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?output dir}; a=${2:?build A}; b=${3:?build B}; passes=${4:-3}; np=${NP:-2}
mkdir -p "$out/bin"
go build -C "$root" -o "$out/bin/" ./cmd/hvdrun
run() { # label dir script args...
  local label=$1 dir=$2; shift 2
  local envs=(); [ "$label" = B ] && [ -n "${ENV_B:-}" ] && read -ra envs <<<"$ENV_B"
  env "${envs[@]}" PYTHONPATH="$dir" flock /tmp/hvd-bench.lock "$out/bin/hvdrun" -np "$np" /usr/bin/python3 "$@" \
    | sed -n "s/^\[0\]<stdout>:/$label /p"
}
for p in $(seq 1 "$passes"); do
  for x in A B; do
    d=$a; [ $x = B ] && d=$b
    echo "== pass $p $x  load $(cut -d' ' -f1-3 /proc/loadavg)"
    run $x "$d" "$root/bench/python/latency.py"
    run $x "$d" "$root/bench/python/torch_phases.py" --passes 3
  done
done 2>&1 | tee "$out/ab-np$np.txt"
