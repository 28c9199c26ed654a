#!/usr/bin/env bash
# small-op rows: base (pre-change) vs new vs new+HVD_CALLER_ROUNDS=1, interleaved
set -u
for v in base new; do
  src=/work/main; [ $v = base ] && src=/tmp/wt-base
  out=/tmp/eng-$v; rm -rf $out; mkdir -p $out/bin $out/python
  (cd $src && go build -o $out/bin/ ./cmd/hvdrun ./cmd/hvdbench && go build -buildmode=c-shared -o $out/python/hvd/libhvd.so ./cmd/libhvd && cp -r python/hvd $out/python/) || exit 1
done
for p in 1 2; do
  for v in base new new1; do
    out=/tmp/eng-$v; env=""; [ $v = new1 ] && { out=/tmp/eng-new; env="HVD_CALLER_ROUNDS=1"; }
    echo "== pass $p $v $(uptime | sed 's/.*load/load/')"
    env $env $out/bin/hvdrun -np 2 $out/bin/hvdbench engine | sed -n 's/^\[0\]<stdout>://p'
    env $env PYTHONPATH=$out/python $out/bin/hvdrun -np 2 /usr/bin/python3 /work/main/bench/python/latency.py | sed -n 's/^\[0\]<stdout>://p'
  done
done
