#!/usr/bin/env bash
# Issue 18's raw rows, before/after/Open MPI interleaved in one session.
#
# Usage: run.sh OUT PASSES "op:sizes ..." SYSTEMS
#   SYSTEMS: comma list of NAME=BINDIR (hvdrun and hvdbench built from one
#   commit; NAME+bind runs them under hvdrun --bind-to core) and "mpi"
#   (bench/anchors/run_anchors.sh --systems mpi-shm). Every launch takes
#   /tmp/hvd-bench.lock (other sessions share the 2-core machine).
# Example (what README.md reports):
#   git worktree add /tmp/raw18/oldtree 0d7572e && (cd /tmp/raw18/oldtree && go build -o /tmp/raw18/old/ ./cmd/hvdrun ./cmd/hvdbench)
#   go build -o /tmp/raw18/new/ ./cmd/hvdrun ./cmd/hvdbench
#   bench/interleaved/run.sh OUT 5 "broadcast:1M,64M,256M alltoall:1M,64M allgather:8,1K" \
#       old=/tmp/raw18/old,new=/tmp/raw18/new,new+bind=/tmp/raw18/new,mpi
set -u
out=$1; passes=$2; cases=$3; systems=$4
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
for p in $(seq 1 "$passes"); do
  for c in $cases; do
    op=${c%%:*}; sizes=${c#*:}
    for s in ${systems//,/ }; do
      if [ "$s" = mpi ]; then
        flock /tmp/hvd-bench.lock "$repo/bench/anchors/run_anchors.sh" --systems mpi-shm --np 2 --sizes "$sizes" \
          --ops "$op" --out "$out/mpi-${op}_p$p" >/dev/null 2>&1 || echo "FAIL mpi $op p$p"
        continue
      fi
      name=${s%%=*}; bin=${s#*=}; bind=()
      case $name in *+bind) bind=(--bind-to core) ;; esac
      flock /tmp/hvd-bench.lock "$bin/hvdrun" "${bind[@]}" -np 2 "$bin/hvdbench" "$op" --backend shm --sizes "$sizes" \
        --system "hvd-shm-$name" --json "$out/hvd-$name-${op}_p$p.json" > "$out/hvd-$name-${op}_p$p.log" 2>&1 \
        || echo "FAIL $name $op p$p"
    done
  done
  echo "pass $p done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/passes.txt"
done
