#!/usr/bin/env bash
# Elastic recovery (docs/performance.md, "Elastic recovery"): kill -9 of a
# rank at np = 4 and a host added at np = 3, with real hvd.torch.elastic
# workers (e2e/testdata/elastic_train.py) under hvdrun's elastic driver,
# default settings. Prints the tables and writes them with every trial's
# events and the machine's load to DIR.
#
# Usage: bench/elastic/run.sh [--trials N] [--out DIR]
# Defaults: 5 trials, DIR = bench/results/<date>-elastic.
# Needs Go and Debian's python3-torch. Run it alone (2-core machines): the
# numbers are latencies and suffer from any other load.
set -eu -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
trials=5
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --trials) trials=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-$root/bench/results/$(date -u +%Y-%m-%d)-elastic}
mkdir -p "$out"
build=$(mktemp -d /tmp/hvd-elastic-bench-build.XXXXXX)
trap 'rm -rf "$build"' EXIT
cd "$root"
go build -o "$build/hvdrun" ./cmd/hvdrun
mkdir -p "$build/python"
cp -r python/hvd "$build/python/hvd"
go build -buildmode=c-shared -o "$build/python/hvd/libhvd.so" ./cmd/libhvd
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))"
  echo "python: $(/usr/bin/python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
/usr/bin/python3 bench/elastic/recovery.py --hvdrun "$build/hvdrun" --pythonpath "$build/python" \
  --script "$root/e2e/testdata/elastic_train.py" --out "$out" --trials "$trials" | tee "$out/tables.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
cat "$out/machine.txt"
