#!/usr/bin/env bash
# step_phases np 2: HEAD default, HEAD + HVD_CALLER_ROUNDS=1, raw-futex variant + HVD_CALLER_ROUNDS=1
set -u
build() { (cd "$1" && go build -o "$2/bin/" ./cmd/hvdrun && go build -buildmode=c-shared -o "$2/python/hvd/libhvd.so" ./cmd/libhvd && cp -r python/hvd "$2/python/") || exit 1; }
rm -rf /tmp/ab-head /tmp/ab-raw; mkdir -p /tmp/ab-head/python/hvd /tmp/ab-raw/python/hvd
build /work/main /tmp/ab-head; build /tmp/wt-raw /tmp/ab-raw
for p in 1 2 3; do
  for v in head drive rawdrive; do
    d=/tmp/ab-head; env="HVD_CALLER_ROUNDS=0"
    [ $v = drive ] && env="HVD_CALLER_ROUNDS=1"
    [ $v = rawdrive ] && { d=/tmp/ab-raw; env="HVD_CALLER_ROUNDS=1"; }
    echo "== pass $p $v $(cut -d' ' -f1-3 /proc/loadavg)"
    env $env PYTHONPATH=$d/python $d/bin/hvdrun -np 2 /usr/bin/python3 /work/main/bench/python/step_phases.py --hidden 64 --rounds 3 --kinds local,hvd,ddp 2>&1 | sed -n 's/^\[0\]<stdout>://p'
  done
done
