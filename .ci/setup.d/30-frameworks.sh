#!/usr/bin/env bash
# Framework virtual environments for hvd.tensorflow and hvd.mxnet (issue 16):
# one cached venv per pinned framework, created from Debian's /usr/bin/python3
# (3.11) without system site-packages (TensorFlow and MXNet need different
# numpy versions, and neither should see Debian's). The tests find them at the
# same paths (HVD_TF_PYTHON / HVD_MXNET_PYTHON override) and skip, naming the
# reason, when they are missing.
# Idempotent and fast when done (an import check per venv); never fails CI.
# Measured: tensorflow-cpu 2.15.1 23 s with pip's cache warm, 30 s cold
# (--no-cache-dir), 1.3 GB; mxnet 1.9.1 + numpy 1.23.5 8 s, 0.3 GB; 2 s when
# both venvs are already there.
set -u
CACHE="${HVD_CACHE_DIR:-$HOME/.cache/hvd}"
TF_VERSION=2.15.1
MXNET_VERSION=1.9.1
TF_VENV="$CACHE/venv-tf-$TF_VERSION"
MX_VENV="$CACHE/venv-mxnet-$MXNET_VERSION"

mkvenv() { # name venv check-python pip-args...
  local name=$1 venv=$2 check=$3; shift 3
  local t0; t0=$(date +%s)
  if "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "30-frameworks: $name ready in $venv"
    return
  fi
  echo "30-frameworks: creating $venv ($*)"
  mkdir -p "$CACHE"
  rm -rf "$venv"
  if /usr/bin/python3 -m venv "$venv" \
     && "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" \
     && "$venv/bin/python" -c "$check"; then
    echo "30-frameworks: $name installed in $(( $(date +%s) - t0 )) s"
  else
    echo "30-frameworks: installing $name into $venv failed: its tests will skip"
    rm -rf "$venv"
  fi
}

mkvenv "tensorflow-cpu $TF_VERSION" "$TF_VENV" \
  "import tensorflow as tf; assert tf.__version__ == '$TF_VERSION'" \
  "tensorflow-cpu==$TF_VERSION"
mkvenv "mxnet $MXNET_VERSION" "$MX_VENV" \
  "import mxnet as mx; assert mx.__version__ == '$MXNET_VERSION'" \
  "mxnet==$MXNET_VERSION" "numpy<1.24"
exit 0
