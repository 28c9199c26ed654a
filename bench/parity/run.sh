#!/usr/bin/env bash
# Horovod's own test suites against hvd (issue 24): Horovod's test files, with
# only their `horovod.*` imports changed to `hvd.*`, run under bin/hvdrun in the
# framework venvs of .ci/setup.d/30-frameworks.sh, hvd installed beside them by
# `hvdgen plugin install --target` (the venvs themselves are not changed).
#
#   bench/parity/run.sh SUITE NP [pytest args...]
#     SUITE: keras (test_tensorflow2_keras.py), tensorflow (test_tensorflow.py),
#            mxnet (test_mxnet1.py), torch (test_torch.py)
#   e.g. bench/parity/run.sh mxnet 3 -k reducescatter
#
# Horovod's test files are not in this repository (nor in Horovod's PyPI
# sdist): they are read from $HVD_HOROVOD_TESTS (default
# ~/.cache/hvd/horovod-tests, holding test/parallel/*.py and test/utils/common.py
# as in Horovod's tree). `bench/parity/run.sh fetch` fills it from a git clone of
# Horovod v0.28.1 where the network allows it.
#
# PARITY_TIMEOUT (seconds, default 900) ends a run that hangs: a test whose
# ranks leave it at different points leaves a collective that never completes.
# Prints pytest's summary per rank and a line
#   parity SUITE np=N: passed P failed F skipped S errors E (rank 0; junit in DIR)
# Needs `make build python plugins` first. Run alone (the ranks use the cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# HVD_BIN: where `make build python plugins` put hvdgen, hvdrun, the plugins
# and libhvd.so (default bin/; another directory lets a run go on while bin/
# is being rebuilt: make BIN=DIR PYBUILD=DIR2 plugins).
BIN="${HVD_BIN:-$ROOT/bin}"
CACHE="${HVD_CACHE_DIR:-$HOME/.cache/hvd}"
TESTS="${HVD_HOROVOD_TESTS:-$CACHE/horovod-tests}"
SUITE=${1:?usage: run.sh SUITE NP [pytest args] | run.sh fetch}
if [ "$SUITE" = fetch ]; then
  tmp=$(mktemp -d)
  git clone -q --depth 1 --branch v0.28.1 https://github.com/horovod/horovod "$tmp/horovod"
  mkdir -p "$TESTS/test"
  cp -r "$tmp/horovod/test/parallel" "$tmp/horovod/test/utils" "$TESTS/test/"
  rm -rf "$tmp"
  echo "parity: Horovod's tests in $TESTS"
  exit 0
fi
NP=${2:?usage: run.sh SUITE NP [pytest args]}
shift 2
case $SUITE in
  keras) FILE=test_tensorflow2_keras.py; FW=tensorflow; PY=${HVD_TF_PYTHON:-$CACHE/venv-tf-2.15.1/bin/python} ;;
  tensorflow) FILE=test_tensorflow.py; FW=tensorflow; PY=${HVD_TF_PYTHON:-$CACHE/venv-tf-2.15.1/bin/python} ;;
  mxnet) FILE=test_mxnet1.py; FW=mxnet; PY=${HVD_MXNET_PYTHON:-$CACHE/venv-mxnet-1.9.1/bin/python} ;;
  torch) FILE=test_torch.py; FW=pytorch; PY=${HVD_TORCH_PYTHON:-/usr/bin/python3} ;;
  *) echo "parity: unknown suite $SUITE (keras, tensorflow, mxnet, torch)" >&2; exit 2 ;;
esac
[ -f "$TESTS/test/parallel/$FILE" ] || { echo "parity: $TESTS/test/parallel/$FILE missing (run.sh fetch, or set HVD_HOROVOD_TESTS)" >&2; exit 2; }
"$PY" -c 'import sys' || { echo "parity: no interpreter $PY (.ci/setup.d/30-frameworks.sh)" >&2; exit 2; }

WORK="$CACHE/parity/$SUITE"
rm -rf "$WORK/site" "$WORK/test" "$WORK/junit"
mkdir -p "$WORK/junit" "$WORK/test"
# The test tree with only the imports changed (horovod.x -> hvd.x).
cp -r "$TESTS/test/parallel" "$TESTS/test/utils" "$WORK/test/"
find "$WORK/test" -name '*.py' -exec sed -i -E \
  's/^([[:space:]]*)(import|from)([[:space:]]+)horovod([. ])/\1\2\3hvd\4/' {} +
# Environment shims, not changes to the tests: Horovod 0.28.1's TF tests
# were written for Keras up to 2.12; under TensorFlow 2.15 tf.keras has no
# __version__ and keras.optimizers.legacy no longer re-exports optimizer_v2
# (keras.src.optimizers.legacy has it), both read at import; and two more
# below.
if [ "$FW" = tensorflow ]; then
  cat > "$WORK/test/parallel/conftest.py" <<'PYEOF'
import keras
import keras.optimizers.legacy
import tensorflow as tf
if not hasattr(tf.keras, '__version__'):
    tf.keras.__version__ = keras.__version__
if not hasattr(keras.optimizers.legacy, 'optimizer_v2'):
    from keras.src.optimizers.legacy import optimizer_v2
    keras.optimizers.legacy.optimizer_v2 = optimizer_v2
# test_tensorflow2_keras.py's test_elastic_state builds its optimizer with
# `keras.optimizers.legacy.Optimizer.Adam(...)` (from its import for Keras
# >= 2.11), an attribute no Keras has: give the class the legacy Adam so the
# line means what it was written for.
if not hasattr(keras.optimizers.legacy.Optimizer, 'Adam'):
    keras.optimizers.legacy.Optimizer.Adam = keras.optimizers.legacy.Adam
# The only reachable copy of test_tensorflow.py v0.28.1 is Intel's fork of
# it, which asks hvd.sycl_built() (Intel's addition; False off Intel GPUs).
import hvd.tensorflow
if not hasattr(hvd.tensorflow, 'sycl_built'):
    hvd.tensorflow.sycl_built = lambda: False
PYEOF
fi
# pytest, parameterized, mock, cloudpickle for the tests, outside the venv.
DEPS="$CACHE/parity/deps-$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if ! PYTHONPATH="$DEPS" "$PY" -c 'import pytest, parameterized, mock, cloudpickle, packaging' 2>/dev/null; then
  "$PY" -m pip install -q --disable-pip-version-check --target "$DEPS" pytest parameterized mock cloudpickle packaging
fi
"$BIN/hvdgen" plugin install --plugin-dir "$BIN" --python "$PY" --target "$WORK/site" --lib "$BIN/libhvd.so" "$FW" >/dev/null

cd "$WORK/test/parallel"
set +e
PYTHONPATH="$WORK/site:$DEPS" timeout "${PARITY_TIMEOUT:-900}" "$BIN/hvdrun" -np "$NP" \
  "$PY" -m pytest -p no:cacheprovider -v -rfEs --junitxml="$WORK/junit/rank"'$HOROVOD_RANK'.xml "$@" "$FILE" \
  > "$WORK/out.txt" 2>&1
rc=$?
set -e
grep -E '^\[[0-9]+\]<stdout>:=+ .*(passed|failed|error|skipped)' "$WORK/out.txt" || true
"$PY" - "$WORK/junit" "$SUITE" "$NP" "$rc" <<'PYEOF'
import os, sys, xml.etree.ElementTree as ET
junit, suite, np_, rc = sys.argv[1:]
# A test counts as failed (or errored, skipped) when it did so on any rank.
order = {'passed': 0, 'skipped': 1, 'failed': 2, 'errors': 3}
result, reasons, ranks = {}, {}, 0
for r in range(int(np_)):
    path = os.path.join(junit, 'rank%d.xml' % r)
    if not os.path.exists(path):
        continue
    ranks += 1
    for tc in ET.parse(path).getroot().iter('testcase'):
        name = tc.get('name')
        kinds = [c.tag for c in tc]
        kind = 'failed' if 'failure' in kinds else 'errors' if 'error' in kinds else \
            'skipped' if 'skipped' in kinds else 'passed'
        if kind == 'skipped':
            reasons[name] = next(c for c in tc if c.tag == 'skipped').get('message', '')
        if order[kind] >= order[result.get(name, 'passed')]:
            result[name] = kind
n = {k: 0 for k in order}
for kind in result.values():
    n[kind] += 1
for name in sorted(result):
    if result[name] in ('failed', 'errors'):
        print('  %s %s' % (result[name].upper(), name))
why = {}
for name, kind in result.items():
    if kind == 'skipped':
        why[reasons.get(name, '')] = why.get(reasons.get(name, ''), 0) + 1
for msg, count in sorted(why.items()):
    print('  skip x%d: %s' % (count, msg))
print('parity %s np=%s: passed %d failed %d skipped %d errors %d (junit of %d/%s ranks in %s; exit %s)'
      % (suite, np_, n['passed'], n['failed'], n['skipped'], n['errors'], ranks, np_, junit, rc))
PYEOF
