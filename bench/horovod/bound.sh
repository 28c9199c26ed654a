#!/bin/sh
# Runs a horovodrun worker on one core, local rank i on the i-th CPU of the
# allowed set (what hvdrun's --bind-to auto/core does for hvd's ranks):
#   horovodrun ... bench/horovod/bound.sh python script.py ...
# horovodrun itself cannot bind; mpirun binds np <= 2 to cores this way.
set -eu
cpu=$(python3 -c 'import os, sys; c = sorted(os.sched_getaffinity(0)); print(c[int(sys.argv[1]) % len(c)])' "${HOROVOD_LOCAL_RANK:?not under horovodrun}")
exec taskset -c "$cpu" "$@"
