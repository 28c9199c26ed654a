#!/usr/bin/env bash
# The GPU check of issue 20, one command from the repository root:
#   bash scripts/gpu-check.sh
# on a machine with NVIDIA GPUs. At most ~8 minutes. It writes its report to
# $OUT/gpu-check.txt when OUT is set (else build/gpu-check.txt) and exits
# non-zero when a step failed. Nothing is downloaded: Go must be installed
# (PATH or /usr/local/go), and the one module the NCCL package needs
# (golang.org/x/sys) must be in the module cache or carried in
# build/gpu-modcache (made here with
#   GOMODCACHE=$PWD/build/gpu-modcache go mod download golang.org/x/sys).
# NCCL and libcudart are found by the dynamic loader, in a CUDA PyTorch
# wheel's nvidia/*/lib directories, or through HVD_NCCL_LIBRARY /
# HVD_CUDART_LIBRARY. Steps:
#   1. build the NCCL package and its tests;
#   2. the conformance suite on real NCCL, 1 GPU and (if present) all GPUs;
#   3. an allreduce table (size, time, algbw, busbw) next to nccl-tests'
#      all_reduce_perf when it is on PATH;
#   4. hvd.torch's CUDA tests with a CUDA torch (staged path), if present.
set -u -o pipefail
cd "$(dirname "$0")/.."
report=${OUT:+$OUT/gpu-check.txt}
report=${report:-build/gpu-check.txt}
mkdir -p "$(dirname "$report")"
status=0
step() { echo; echo "=== $*"; }
fail() { echo "FAIL: $*"; status=1; }

run_check() {
step "machine"; date; uname -a; uptime
if ! command -v nvidia-smi >/dev/null; then echo "FAIL: nvidia-smi not found: no NVIDIA driver"; return 1; fi
nvidia-smi -L; ngpu=$(nvidia-smi -L | grep -c '^GPU')
GO=$(command -v go || true); [ -z "$GO" ] && [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go
if [ -z "$GO" ]; then echo "FAIL: no Go toolchain (not on PATH, no /usr/local/go): install Go 1.26 or carry it"; return 1; fi
"$GO" version
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
[ -d build/gpu-modcache ] && export GOMODCACHE=$PWD/build/gpu-modcache

PY=/usr/bin/python3; command -v "$PY" >/dev/null || PY=$(command -v python3 || true)
if [ -z "${HVD_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2 && [ -n "$PY" ]; then
  site=$("$PY" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
  for lib in "$site"/nvidia/nccl/lib/libnccl.so.2; do [ -f "$lib" ] && export HVD_NCCL_LIBRARY=$lib; done
  for lib in "$site"/nvidia/cuda_runtime/lib/libcudart.so.*; do [ -f "$lib" ] && export HVD_CUDART_LIBRARY=$lib; done
fi
echo "HVD_NCCL_LIBRARY=${HVD_NCCL_LIBRARY:-} HVD_CUDART_LIBRARY=${HVD_CUDART_LIBRARY:-}"

step "1. build"
timeout 180 "$GO" test -count=1 -run '^$' ./backends/nccl || fail "build"

step "2. conformance on NCCL (1 GPU, then all $ngpu)"
HVD_GPU_CHECK=1 timeout 240 "$GO" test -count=1 -v -run 'TestGPUConformance' ./backends/nccl > build/gpu-conformance.log 2>&1 || fail "conformance"
grep -E '^(---|ok|FAIL|PASS)|gpu_test' build/gpu-conformance.log | grep -v -- '--- PASS' | tail -40
grep -c -- '--- PASS' build/gpu-conformance.log | sed 's/^/cases passed: /'

step "3. allreduce table"
HVD_GPU_CHECK=1 timeout 120 "$GO" test -count=1 -v -run 'TestGPUBench' ./backends/nccl 2>&1 | grep -vE '^=== RUN' || fail "bench"
if command -v all_reduce_perf >/dev/null; then
  timeout 60 all_reduce_perf -b 1K -e 256M -f 8 -g "$ngpu" || echo "all_reduce_perf failed"
else
  echo "nccl-tests' all_reduce_perf not on PATH: no reference figures"
fi

step "4. hvd.torch with CUDA tensors"
if [ -n "$PY" ] && "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  if timeout 150 make build python >build/gpu-make.log 2>&1; then
    PYTHONPATH=build/python timeout 90 bin/hvdrun -np 2 "$PY" -m pytest -q -p no:cacheprovider python/tests/test_cuda_staging.py || fail "hvd.torch CUDA tests"
  else
    tail -20 build/gpu-make.log; fail "make build python (needs the module cache of the whole project)"
  fi
else
  echo "SKIPPED: no CUDA torch for $PY (hvd.torch's CUDA tests need one)"
fi

step "summary"; [ $status = 0 ] && echo "gpu-check: PASS" || echo "gpu-check: FAIL"
return $status
}

# The report is complete when the script returns (no asynchronous tee).
run_check 2>&1 | tee "$report"
exit "${PIPESTATUS[0]}"
