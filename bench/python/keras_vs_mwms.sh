#!/usr/bin/env bash
# Issue 24's Keras step benchmark: model.fit with hvd.tensorflow.keras's
# DistributedOptimizer (2 ranks under hvdrun) next to the same model.fit under
# tf.distribute.MultiWorkerMirroredStrategy (2 worker processes, TF_CONFIG on
# 127.0.0.1, RING collectives over gRPC on the CPU), alternating
# hvd, mwms, hvd, mwms... ROUNDS times per model, in the tensorflow-cpu venv of
# .ci/setup.d/30-frameworks.sh with hvd installed beside it by
# `hvdgen plugin install --target` (the venv itself is not changed).
#
#   bench/python/keras_vs_mwms.sh [ROUNDS]   (default 4; ~4 min at 4 on 2 idle cores)
#   MODELS="cnn mlp" BATCH=32 STEPS=80 WARMUP=10 OPTIMIZER=adam, and any
#   further keras_step.py flags in KERAS_STEP_ARGS (e.g. "--intra 2").
#
# HVD_BIN: the directory with hvdgen, hvd-plugin-tensorflow, hvdrun,
# SHA256SUMS and libhvd.so (default bin/, as `make build python plugins`
# leaves it; a private build keeps the run independent of others rebuilding
# bin/ meanwhile).
#
# Prints every run's line (keras_step IMPL MODEL median p25 p75 steps) and, per
# model, the median over rounds of each impl's median step time and
# hvd/mwms. Needs `make build python plugins`. Run alone, under the exclusive
# bench lock: flock /tmp/hvd-bench.lock bench/python/keras_vs_mwms.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-4}
MODELS=${MODELS:-cnn mlp}
CACHE="${HVD_CACHE_DIR:-$HOME/.cache/hvd}"
TFPY=${HVD_TF_PYTHON:-$CACHE/venv-tf-2.15.1/bin/python}
BIN=${HVD_BIN:-bin}
SITE=build/bench-keras/tf
rm -rf "$SITE" && mkdir -p build/bench-keras
"$BIN/hvdgen" plugin install --plugin-dir "$BIN" --target "$SITE" --lib "$BIN/libhvd.so" --python "$TFPY" tensorflow \
  >"$SITE.log" 2>&1 || { cat "$SITE.log" >&2; echo "hvdgen plugin install failed (make build python plugins?)" >&2; exit 1; }
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONDONTWRITEBYTECODE=1
FLAGS=(--batch "${BATCH:-32}" --steps "${STEPS:-80}" --warmup "${WARMUP:-10}" --optimizer "${OPTIMIZER:-adam}")
# shellcheck disable=SC2206
FLAGS+=(${KERAS_STEP_ARGS:-})
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

mwms() { # model: two workers, worker 0's line on stdout
  local ports i pids=()
  ports=$("$TFPY" -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
  read -r p0 p1 <<<"$ports"
  for i in 0 1; do
    TF_CONFIG="{\"cluster\":{\"worker\":[\"127.0.0.1:$p0\",\"127.0.0.1:$p1\"]},\"task\":{\"type\":\"worker\",\"index\":$i}}" \
      timeout -k 10 600 "$TFPY" bench/python/keras_step.py --impl mwms --model "$1" "${FLAGS[@]}" >"$LOG/mwms.$i" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for i in 0 1; do wait "${pids[$i]}" || rc=$?; done
  grep '^keras_step' "$LOG/mwms.0" || { echo "mwms run failed (exit $rc):" >&2; tail -n 20 "$LOG/mwms.0" "$LOG/mwms.1" >&2; exit 1; }
}

hvd() {
  PYTHONPATH=$SITE timeout -k 10 600 "$BIN/hvdrun" -np 2 "$TFPY" bench/python/keras_step.py --impl hvd --model "$1" "${FLAGS[@]}" \
    >"$LOG/hvd" 2>&1 || { echo "hvd run failed:" >&2; tail -n 20 "$LOG/hvd" >&2; exit 1; }
  sed -n 's/^\[0\]<stdout>://p' "$LOG/hvd" | grep '^keras_step'
}

echo "# $(date -u +%FT%TZ) checkout $(git rev-parse --short HEAD), hvd from $BIN, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); ${FLAGS[*]}"
for r in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    hvd "$m"
    mwms "$m"
  done
done | tee "$LOG/all"
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$LOG/all" <<'PYEOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[2], {}).setdefault(f[1], []).append(float(f[3]))
print('%-5s %-5s %10s   %s' % ('model', 'impl', 'median_ms', 'per round (median step ms)'))
for model, by in runs.items():
    for impl in ('hvd', 'mwms'):
        print('%-5s %-5s %10.2f   %s' % (model, impl, statistics.median(by[impl]), ' '.join('%.1f' % v for v in by[impl])))
    print('%-5s hvd/mwms %.2f (target <= 1.2)' % (model, statistics.median(by['hvd']) / statistics.median(by['mwms'])))
PYEOF
