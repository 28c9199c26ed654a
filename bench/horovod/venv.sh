#!/usr/bin/env bash
# Builds real Horovod 0.28.1 (PyTorch + gloo, CPU) from its PyPI source into a
# cached virtual environment over Debian's python3-torch, for the side-by-side
# benchmarks in bench/python (issue 27). Never used by a test.
#
#   bench/horovod/venv.sh        # prints the venv's python; builds it once (~2 min of CPU)
#
# HVD_CACHE_DIR (default ~/.cache/hvd) holds venv-horovod-0.28.1.
set -euo pipefail
CACHE="${HVD_CACHE_DIR:-$HOME/.cache/hvd}"
VENV="$CACHE/venv-horovod-0.28.1"
if [ -x "$VENV/bin/horovodrun" ] && "$VENV/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  echo "$VENV/bin/python"
  exit 0
fi
mkdir -p "$CACHE"
rm -rf "$VENV"
/usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q 'setuptools<70' wheel 'cloudpickle' 'psutil' 'pyyaml' 'packaging' >&2
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 \
HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS=-j2 \
  "$VENV/bin/pip" install -q --no-build-isolation --no-cache-dir horovod==0.28.1 >&2
"$VENV/bin/python" -c 'import horovod.torch as h; print("horovod", h.__version__ if hasattr(h, "__version__") else "0.28.1", file=__import__("sys").stderr)' >&2
echo "$VENV/bin/python"
