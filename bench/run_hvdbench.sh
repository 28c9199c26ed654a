#!/usr/bin/env bash
# The numbers of docs/performance.md: hvdbench (hvd's shared-memory and TCP
# backends under hvdrun) and the anchors (torch.distributed gloo, Open MPI
# over TCP and over shared memory), interleaved pass by pass in one session
# on one machine, then Markdown tables with ratios and SVG plots of busbw
# against size.
#
# Usage: bench/run_hvdbench.sh [--np N] [--sizes LIST] [--ops LIST] [--passes P]
#                              [--backends LIST] [--out DIR] [--no-anchors] [--bind]
# Defaults: np 2, sizes 8,1K,64K,1M,16M,64M,256M, all five collectives,
# backends shm,tcp, 3 passes, DIR = bench/results/tmp/run-<date>-<time>.
# hvd runs as hvdrun starts it by default (unbound); --bind adds
# hvdrun --bind-to core, as mpirun binds the MPI anchors' ranks at np <= 2
# (mpirun --report-bindings). Bound ranks cannot dodge other load on their
# core, so on a shared 2-core VM binding makes hvd's numbers noisier.
# Needs Go; the anchors need Debian's python3-torch, python3-mpi4py and
# openmpi-bin (bench/anchors/README.md). Run it alone: 2-core machines.
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
np=2
sizes=8,1K,64K,1M,16M,64M,256M
ops=allreduce,allgather,broadcast,alltoall,reducescatter
passes=3
out=""
anchors=1
backends=shm,tcp
bind=()
while [ $# -gt 0 ]; do
  case "$1" in
    --np) np=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-anchors) anchors=0; shift ;;
    --backends) backends=$2; shift 2 ;;
    --bind) bind=(--bind-to core); shift ;;
    *) echo "run_hvdbench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="$root/bench/results/tmp/run-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
(cd "$root" && go build -o "$root/bin/" ./cmd/hvdrun ./cmd/hvdbench)
{
  echo "date: $(date -Is)"; uname -a; lscpu | grep -E 'Model name|^CPU\(s\)|Hypervisor' || true
  go version; nproc; free -g | head -2
} > "$out/machine.txt"
for p in $(seq 1 "$passes"); do
  for be in ${backends//,/ }; do
    for op in ${ops//,/ }; do
      echo "== pass $p: hvd-$be $op"
      "$root/bin/hvdrun" "${bind[@]}" -np "$np" "$root/bin/hvdbench" "$op" --backend "$be" --sizes "$sizes" \
        --json "$out/hvd-${be}_${op}_np${np}_p$p.json" | sed 's/^\[0\]<stdout>://' | grep -v '^\[' || true
    done
    echo "== pass $p: hvd-$be barrier"
    "$root/bin/hvdrun" "${bind[@]}" -np "$np" "$root/bin/hvdbench" barrier --backend "$be" --json "$out/hvd-${be}_barrier_np${np}_p$p.json" >/dev/null
  done
  if [ "$anchors" = 1 ]; then
    "$root/bench/anchors/run_anchors.sh" --np "$np" --sizes "$sizes" --ops "$ops,barrier" --out "$out/anchors-p$p" >/dev/null 2>&1 \
      || echo "anchors pass $p failed: see $out/anchors-p$p/log.txt" >&2
  fi
done
files=("$out"/hvd-*_np"$np"_p*.json)
if [ "$anchors" = 1 ]; then files+=("$out"/anchors-p*/*.json); fi
base=hvd-${backends%%,*}
/usr/bin/env python3 "$root/bench/tables.py" --base "$base" "${files[@]}" > "$out/tables.md"
/usr/bin/env python3 "$root/bench/plot.py" --out "$out/plots" "${files[@]}" >/dev/null
echo "tables: $out/tables.md; plots: $out/plots/"
