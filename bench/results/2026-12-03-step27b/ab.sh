#!/usr/bin/env bash
# A/B: HEAD build vs working tree, step_phases np 2, alternating.
set -u
R=/work/main
build() { # src out
  (cd "$1" && go build -o "$2/bin/" ./cmd/hvdrun && go build -buildmode=c-shared -o "$2/python/hvd/libhvd.so" ./cmd/libhvd && cp -r python/hvd "$2/python/") || exit 1
}
rm -rf /tmp/ab-base /tmp/ab-new; mkdir -p /tmp/ab-base/python/hvd /tmp/ab-new/python/hvd
build /tmp/wt-base /tmp/ab-base; build $R /tmp/ab-new
NP=${NP:-2}; H=${H:-64}; PASSES=${PASSES:-3}
for p in $(seq 1 $PASSES); do
  for v in base new new0; do
    d=/tmp/ab-$v; env=""; [ $v = new0 ] && { d=/tmp/ab-new; env="HVD_DRIVE_END=0"; }
    echo "== pass $p $v $(uptime | sed 's/.*load/load/')"
    env $env PYTHONPATH=$d/python $d/bin/hvdrun -np $NP /usr/bin/python3 $R/bench/python/step_phases.py --hidden $H --rounds 3 --kinds local,hvd,ddp --quantiles 2>&1 | sed -n 's/^\[0\]<stdout>://p'
  done
done
