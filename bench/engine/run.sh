#!/usr/bin/env bash
# Issue 18's engine rows: hvdbench engine (Go SDK) and bench/python/latency.py
# (hvd.torch), np 2 (and NP=4), P passes interleaved, under the shared
# benchmark lock. Builds its own copies into $OUT so that other work in
# the tree does not change what is measured.
# Usage: bench/engine/run.sh OUTDIR [passes]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?output dir}; passes=${2:-3}; np=${NP:-2}
mkdir -p "$out/bin" "$out/python"
cd "$root"
go build -o "$out/bin/" ./cmd/hvdrun ./cmd/hvdbench
make -s python PYBUILD="$out/python"  # libhvd.so, the package and its C fast path
export PYTHONPATH=$out/python
for p in $(seq 1 "$passes"); do
  echo "== pass $p  $(uptime)"
  "$out/bin/hvdrun" -np "$np" "$out/bin/hvdbench" engine --json "$out/engine_np${np}_p$p.json" | sed -n 's/^\[0\]<stdout>://p'
  "$out/bin/hvdrun" -np "$np" /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p'
done
