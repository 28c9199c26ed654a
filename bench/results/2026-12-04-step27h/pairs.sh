#!/usr/bin/env bash
# The issue's small-op ratio on a noisy VM: the Go SDK's 200 x 4 KiB async
# batch (hvdbench engine) and hvd.torch's (bench/python/latency.py)
# alternated PAIRS times, each at -np 2 with hvdrun's default binding;
# per pair the median and the minimum of each and their ratios. Run alone,
# after make build python.
set -euo pipefail
cd "$(dirname "$0")/../../.."
printf '%-5s %10s %10s %7s %10s %10s %7s\n' pair go_med torch_med ratio go_min torch_min ratio
for i in $(seq 1 "${1:-8}"); do
  g=$(bin/hvdrun -np 2 bin/hvdbench engine | sed -n 's/^\[0\]<stdout>://p' | grep -E "^  engine 200 x")
  t=$(PYTHONPATH=build/python bin/hvdrun -np 2 /usr/bin/python3 bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p' | grep "200 x")
  gm=$(echo "$g" | awk '{print $8}'); gn=$(echo "$g" | awk '{print $9}')
  tm=$(echo "$t" | awk '{print $8}'); tn=$(echo "$t" | awk '{print $9}')
  printf '%-5s %10s %10s %7.2f %10s %10s %7.2f\n' "$i" "$gm" "$tm" "$(echo "$tm / $gm" | bc -l)" "$gn" "$tn" "$(echo "$tn / $gn" | bc -l)"
done
