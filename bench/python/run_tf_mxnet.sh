#!/usr/bin/env bash
# hvd.tensorflow and hvd.mxnet allreduce next to hvd.torch (issue 16,
# docs/frameworks.md): the same hvdrun, the same engine, each framework in
# its own interpreter (Debian's python3 for torch, the venvs of
# .ci/setup.d/30-frameworks.sh for TensorFlow and MXNet), interleaved ROUNDS
# times so that load changes hit every framework alike. Run it under the
# bench lock: flock /tmp/hvd-bench.lock bench/python/run_tf_mxnet.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
NP=${NP:-2}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-4096,67108864}
CACHE="${HVD_CACHE_DIR:-$HOME/.cache/hvd}"
TFPY=${HVD_TF_PYTHON:-$CACHE/venv-tf-2.15.1/bin/python}
MXPY=${HVD_MXNET_PYTHON:-$CACHE/venv-mxnet-1.9.1/bin/python}
make -s python plugins >/dev/null
OUT=build/bench-frameworks
rm -rf "$OUT" && mkdir -p "$OUT"
bin/hvdgen plugin install --target "$OUT/tf" --lib build/python/hvd/libhvd.so --python "$TFPY" tensorflow >/dev/null 2>&1
bin/hvdgen plugin install --target "$OUT/mx" --lib build/python/hvd/libhvd.so --python "$MXPY" mxnet >/dev/null 2>&1
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONDONTWRITEBYTECODE=1
# one framework thread per rank, as the torch run (torch.set_num_threads(1))
export OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1
echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') np=$NP"
for r in $(seq "$ROUNDS"); do
  PYTHONPATH=build/python bin/hvdrun -np "$NP" /usr/bin/python3 bench/python/allreduce_tf_mxnet.py torch "$SIZES"
  PYTHONPATH=$OUT/tf bin/hvdrun -np "$NP" "$TFPY" bench/python/allreduce_tf_mxnet.py tensorflow "$SIZES"
  PYTHONPATH=$OUT/mx bin/hvdrun -np "$NP" "$MXPY" bench/python/allreduce_tf_mxnet.py mxnet "$SIZES"
  PYTHONPATH=$OUT/mx bin/hvdrun -np "$NP" "$MXPY" bench/python/allreduce_tf_mxnet.py mxnet_ "$SIZES"
done | sed -n 's/^\[0\]<stdout>://p' | grep -v '^#' | /usr/bin/python3 -c '
import sys, statistics
runs = {}
for line in sys.stdin:
    fw, size, us = line.split()
    runs.setdefault(int(size), {}).setdefault(fw, []).append(float(us))
print("%-11s %10s %12s %9s" % ("framework", "bytes", "median_us", "x_torch"))
for size in sorted(runs):
    base = statistics.median(runs[size].get("torch", [float("nan")]))
    for fw in ("torch", "tensorflow", "mxnet", "mxnet_"):
        if fw in runs[size]:
            m = statistics.median(runs[size][fw])
            print("%-11s %10d %12.1f %9.2f   (%d runs: %s)" % (fw, size, m, m / base, len(runs[size][fw]),
                  " ".join("%.0f" % v for v in runs[size][fw])))
'
echo "# $(uptime | sed 's/.*load/load/')"
