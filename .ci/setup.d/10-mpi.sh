#!/bin/sh
# Open MPI and mpi4py for the MPI tests (issue 15: e2e/mpi_test.go,
# python/tests/test_mpi.py). Idempotent; never fails CI: without them the
# MPI tests skip, naming what is missing.
if command -v mpirun >/dev/null 2>&1 && [ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h -o -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
	&& /usr/bin/python3 -c 'import mpi4py' >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
{ apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev python3-mpi4py ||
	{ apt-get update && apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev python3-mpi4py; }; } >/tmp/hvd-ci-mpi.log 2>&1 ||
	echo "10-mpi.sh: could not install Open MPI / mpi4py (see /tmp/hvd-ci-mpi.log); the MPI tests will skip"
exit 0
