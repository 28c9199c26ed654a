#!/usr/bin/env bash
# What the job's metrics cost a training step (docs/performance.md, issue 28):
# metrics_cost.py under hvdrun --metrics-port, with /metrics and /status.json
# scraped every second meanwhile (as Prometheus and an open status page
# would). Run alone, under the bench lock; needs `make build python` (or
# HVD_BIN / PYTHONPATH pointing at a build).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
HVDRUN=${HVD_BIN:-bin}/hvdrun
export PYTHONPATH=${PYTHONPATH:-build/python}:bench/python
NP=${NP:-2}
PORT=${PORT:-19397}
( while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics"; curl -s -o /dev/null "http://127.0.0.1:$PORT/status.json"; done ) &
scraper=$!
trap 'kill $scraper' EXIT
for h in 64 1024; do
  "$HVDRUN" --metrics-port "$PORT" -np "$NP" $PY bench/python/metrics_cost.py --hidden "$h" "$@" | sed -n 's/^\[0\]<stdout>://p'
done
