#!/usr/bin/env bash
# The pipeline numbers of docs/performance.md, in one session:
#  1. the bubble: the job `hvdgen generate` writes for bench/pipeline/hvd.yaml
#     (8 Linear 512x512 layers, 2 stages, 2 ranks) trained under hvdrun with
#     M = 1, 4, 8 micro-batches, GPipe and 1F1B, each rank timing its compute,
#     its transfer waits and its step (train.py --profile); analyze.py compares
#     the measured idle fraction with the ideal (P-1)/(M+P-1);
#  2. the transfers: the activation sizes of those runs (and a sweep) moved by
#     hvd.torch isend/irecv (torch_p2p.py, what the pipeline does), by the Go
#     API (hvdbench sendrecv) and by the anchors (torch gloo isend/irecv, Open
#     MPI Sendrecv over shared memory and TCP).
#
# Usage: bench/pipeline/run.sh [--passes P] [--steps N] [--batch B] [--out DIR]
# Defaults: 3 passes, 12 steps (the first 2 are dropped), batch 128,
# DIR = bench/results/tmp/pipeline-<date>-<time>. Run it alone (2 cores).
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
passes=3
steps=12
batch=128
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --passes) passes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="$root/bench/results/tmp/pipeline-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
py=${PYTHON:-/usr/bin/python3}
(cd "$root" && make build python plugins >/dev/null)
{
  echo "date: $(date -Is)"; uname -a; lscpu | grep -E 'Model name|^CPU\(s\)|Hypervisor' || true
  go version; nproc; "$py" -c 'import torch; print("torch", torch.__version__, "threads used: 1 per rank")'
} > "$out/machine.txt"
# The job is generated afresh for every run (never checked in: it would
# drift from the generator); generate.txt keeps hvdgen's summary.
job="$root/build/bench-pipeline-job"
rm -rf "$job"
"$root/bin/hvdgen" generate -f "$root/bench/pipeline/hvd.yaml" --plugin-dir "$root/bin" --out "$job" > "$out/generate.txt"
export PYTHONPATH="$root/build/python${PYTHONPATH:+:$PYTHONPATH}"
for p in $(seq 1 "$passes"); do
  for sched in gpipe 1f1b; do
    for m in 1 4 8; do
      echo "== pass $p: $sched M=$m"
      "$root/bin/hvdrun" -np 2 "$py" "$job/train.py" --steps "$steps" --batch-size "$batch" \
        --micro-batches "$m" --schedule "$sched" --profile "$out/profile_${sched}_m${m}_p$p.json" | grep -E 'steps in' || true
    done
  done
  # Activation sizes: batch x 512 x 4 B / M for M = 8, 4, 1, then a sweep.
  sizes=$((batch * 2048 / 8)),$((batch * 2048 / 4)),$((batch * 2048)),8,1M,16M
  "$root/bin/hvdrun" -np 2 "$py" "$root/bench/pipeline/torch_p2p.py" --sizes "$sizes" --json "$out/hvd-torch-p2p_p$p.json" >/dev/null
  "$root/bin/hvdrun" -np 2 "$root/bin/hvdbench" sendrecv --system hvd-go --sizes "$sizes" --json "$out/hvd-go-sendrecv_p$p.json" >/dev/null
  "$root/bench/anchors/run_anchors.sh" --np 2 --sizes "$sizes" --ops sendrecv --out "$out/anchors-p$p" >/dev/null 2>&1 \
    || echo "anchors pass $p failed: see $out/anchors-p$p/log.txt" >&2
done
"$py" "$root/bench/pipeline/analyze.py" "$out" > "$out/bubble.md"
"$py" "$root/bench/tables.py" --base hvd-torch-p2p "$out"/hvd-*.json "$out"/anchors-p*/*.json > "$out/transfer.md" 2>/dev/null || true
cat "$out/bubble.md" "$out/transfer.md"
echo "results: $out"
