#!/usr/bin/env bash
# Run the anchor benchmarks one after another on this machine, loopback only:
#   gloo     torch.distributed gloo           (torch_gloo_bench.py, torch.multiprocessing.spawn)
#   mpi-shm  Open MPI, shared memory (vader)  (mpi_bench.py under mpirun --mca btl self,vader)
#   mpi-tcp  Open MPI, TCP on lo              (mpi_bench.py under mpirun --mca btl self,tcp)
# and write one JSON (and one text log) per system into DIR, then Markdown tables.
#
# Usage: bench/anchors/run_anchors.sh [--np N] [--sizes LIST | -b MIN -e MAX [-f FACTOR]]
#            [--ops LIST] [--out DIR] [--quick] [--systems gloo,mpi-shm,mpi-tcp]
#            [--mpirun-args "ARGS"] [--timeout SEC] [--with FILE.json]... [--base SYSTEM]
#
#   --np N            ranks (default 2)
#   --sizes LIST      e.g. 8,1K,64K,1M,16M,64M,256M (the default list)
#   -b/-e/-f          nccl-tests style sweep: MIN, MAX, multiplication factor (default 2)
#   --ops LIST        allreduce,allgather,broadcast,reducescatter,alltoall,barrier (default: all)
#   --out DIR         output folder (default bench/results/tmp/anchors-<date>-<time>)
#   --quick           smoke test: fewer iterations and samples (never publish these)
#   --systems LIST    subset and order of gloo,mpi-shm,mpi-tcp (default: all three)
#   --mpirun-args S   extra mpirun arguments for both MPI runs, e.g.
#                     "--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 1"
#   --timeout SEC     wall-clock limit per system (default 3600); the run is killed after it
#   --with FILE       also put FILE (e.g. hvdbench --json output) into DIR/tables.md
#   --base SYSTEM     ratio base for DIR/tables.md (default: hvd-tcp if present in the data)
#
# Environment: PYTHON (default /usr/bin/python3, the interpreter with Debian's python3-torch,
# python3-numpy and python3-mpi4py), MPIRUN (default mpirun).
#
# Full sweep (np=2, default sizes, all ops) takes several minutes on 2 vCPUs; the
# 256 MiB alltoall needs about 1 GiB of memory per rank.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench=$(cd "$here/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
MPIRUN=${MPIRUN:-mpirun}
orig_args="$*"
INSTALL_CMD="apt-get update && apt-get install -y python3-torch python3-numpy openmpi-bin libopenmpi-dev python3-mpi4py"

np=2
out=""
quick=""
systems="gloo,mpi-shm,mpi-tcp"
mpirun_extra=""
timeout_s=3600
base=""
size_args=()
ops_args=()
with_files=()

die() { echo "run_anchors.sh: $*" >&2; exit 2; }
need() { [ "$#" -ge 2 ] || die "option $1 needs a value"; }

while [ "$#" -gt 0 ]; do
    case "$1" in
        --np) need "$@"; np=$2; shift 2 ;;
        --sizes) need "$@"; size_args+=(--sizes "$2"); shift 2 ;;
        -b|--minbytes) need "$@"; size_args+=(-b "$2"); shift 2 ;;
        -e|--maxbytes) need "$@"; size_args+=(-e "$2"); shift 2 ;;
        -f|--stepfactor) need "$@"; size_args+=(-f "$2"); shift 2 ;;
        --ops) need "$@"; ops_args=(--ops "$2"); shift 2 ;;
        --out) need "$@"; out=$2; shift 2 ;;
        --quick) quick=--quick; shift ;;
        --systems) need "$@"; systems=$2; shift 2 ;;
        --mpirun-args) need "$@"; mpirun_extra=$2; shift 2 ;;
        --timeout) need "$@"; timeout_s=$2; shift 2 ;;
        --with) need "$@"; with_files+=("$2"); shift 2 ;;
        --base) need "$@"; base=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "--np must be a positive integer, got '$np'"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer (seconds)"
IFS=, read -r -a sys_list <<<"$systems"
for s in "${sys_list[@]}"; do
    case "$s" in gloo|mpi-shm|mpi-tcp) ;; *) die "unknown system '$s' (known: gloo, mpi-shm, mpi-tcp)" ;; esac
done
for f in "${with_files[@]+"${with_files[@]}"}"; do [ -r "$f" ] || die "--with $f: no such readable file"; done

# ------------------------------------------------------------------ tool checks
missing=()
want_gloo=0; want_mpi=0
for s in "${sys_list[@]}"; do
    case "$s" in gloo) want_gloo=1 ;; mpi-*) want_mpi=1 ;; esac
done
if ! command -v "$PY" >/dev/null 2>&1; then
    missing+=("python3 ($PY not found; set PYTHON=/path/to/python3)")
else
    "$PY" -c 'import numpy' 2>/dev/null || missing+=("python3-numpy (import numpy failed in $PY)")
    if [ "$want_gloo" = 1 ]; then
        if ! err=$("$PY" -c 'import torch.distributed as d, sys; sys.exit(0 if d.is_available() and d.is_gloo_available() else 3)' 2>&1); then
            missing+=("python3-torch with gloo (import torch / torch.distributed gloo failed in $PY: $(echo "$err" | tail -n 1))")
        fi
    fi
    if [ "$want_mpi" = 1 ]; then
        "$PY" -c 'import mpi4py' 2>/dev/null || missing+=("python3-mpi4py (import mpi4py failed in $PY)")
    fi
fi
if [ "$want_mpi" = 1 ] && ! command -v "$MPIRUN" >/dev/null 2>&1; then
    missing+=("openmpi-bin ($MPIRUN not found on PATH)")
fi
command -v timeout >/dev/null 2>&1 || missing+=("coreutils timeout")
if [ "${#missing[@]}" -gt 0 ]; then
    {
        echo "run_anchors.sh: cannot run the anchors, missing:"
        for m in "${missing[@]}"; do echo "  - $m"; done
        echo "Install them (Debian 12, as root):"
        echo "  $INSTALL_CMD"
        echo "or run only the systems you have, e.g. --systems mpi-shm,mpi-tcp"
    } >&2
    exit 3
fi

# ------------------------------------------------------------------ output folder
if [ -z "$out" ]; then
    out="$bench/results/tmp/anchors-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
log="$out/log.txt"

steal() { awk '/^cpu /{print $9}' /proc/stat 2>/dev/null || echo 0; }
note() { echo "$*" | tee -a "$log"; }

{
    echo "# anchors run $(date -Is)"
    echo "command: $0 $orig_args"
    echo "host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "cpu: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
    echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)"
    [ "$want_gloo" = 1 ] && echo "torch: $("$PY" -c 'import torch; print(torch.__version__)' 2>&1)"
    [ "$want_mpi" = 1 ] && echo "mpi4py: $("$PY" -c 'import mpi4py; print(mpi4py.__version__)' 2>&1); $("$MPIRUN" --version 2>&1 | head -n 1)"
    echo "np=$np quick=${quick:-no} sizes: ${size_args[*]:-default} ops: ${ops_args[*]:-all} systems: $systems"
    [ -n "$mpirun_extra" ] && echo "extra mpirun args: $mpirun_extra"
} >"$log"
cat "$log"

common_args=("${size_args[@]+"${size_args[@]}"}" "${ops_args[@]+"${ops_args[@]}"}")
[ -n "$quick" ] && common_args+=("$quick")
mpi_base=("$MPIRUN" --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo -np "$np")
# shellcheck disable=SC2206  # word splitting of the extra arguments is intended
mpi_extra=($mpirun_extra)

failed=()
jsons=()
for s in "${sys_list[@]}"; do
    json="$out/${s}_np${np}.json"
    txt="$out/${s}_np${np}.txt"
    rm -f "$json"
    case "$s" in
        gloo)
            cmd=(env GLOO_SOCKET_IFNAME=lo "$PY" "$here/torch_gloo_bench.py" --np "$np" --system gloo) ;;
        mpi-shm)
            cmd=("${mpi_base[@]}" --mca btl self,vader "${mpi_extra[@]+"${mpi_extra[@]}"}"
                 "$PY" "$here/mpi_bench.py" --system mpi-shm) ;;
        mpi-tcp)
            cmd=("${mpi_base[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo
                 "${mpi_extra[@]+"${mpi_extra[@]}"}" "$PY" "$here/mpi_bench.py" --system mpi-tcp) ;;
    esac
    cmd+=("${common_args[@]}" --json "$json")
    note ""
    note "== $s: ${cmd[*]}"
    load0=$(cut -d' ' -f1-3 /proc/loadavg); st0=$(steal); t0=$(date +%s.%N)
    timeout --kill-after=30 "$timeout_s" "${cmd[@]}" 2>&1 | tee "$txt"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N); st1=$(steal)
    note "== $s: rc=$rc wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f s", b-a}') loadavg before: $load0 steal jiffies: $((st1 - st0))"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note "== $s: TIMED OUT after ${timeout_s}s (rows finished so far are in $json)"
    fi
    [ "$rc" -ne 0 ] && failed+=("$s(rc=$rc)")
    [ -s "$json" ] && jsons+=("$json")
done

if [ "${#jsons[@]}" -gt 0 ] || [ "${#with_files[@]}" -gt 0 ]; then
    targs=()
    [ -n "$base" ] && targs+=(--base "$base")
    if "$PY" "$bench/tables.py" "${targs[@]+"${targs[@]}"}" \
        "${with_files[@]+"${with_files[@]}"}" "${jsons[@]+"${jsons[@]}"}" >"$out/tables.md"; then
        note ""
        note "tables: $out/tables.md"
    else
        note "tables.py failed (the JSON files are still in $out)"
    fi
fi

note "results: $out"
if [ "${#failed[@]}" -gt 0 ]; then
    note "FAILED: ${failed[*]}"
    exit 1
fi
exit 0
