#!/usr/bin/env bash
# One time-boxed call on a lent GPU machine (no TensorFlow, no network): build,
# smoke test, CPU-vs-GPU bits, sanitizers, CPU ISA tests and the cuDNN timing,
# each phase under its own `timeout` so that one slow or hung phase cannot eat
# the others' time. Logs go to the folder given as $1 (default $OUT), one file
# per phase (at most 8 files: what the device tool brings back).
#
#   scripts/gpu_lease.sh [LOGDIR]
#
# Build: when build-pre/ holds libdetconv_cpu.a and libdetconv_gpu.a (built
# on the development machine: `cmake -DDETCONV_WITH_TF=OFF -DDETCONV_CUDA=ON
# -DDETCONV_CUDA_ARCHS=90-real`, the slow part) only the pybind11 module is
# compiled here and linked against them, for this machine's Python; otherwise
# (or if that fails) `scripts/gpu_check.sh build` builds everything.
#
# Budgets in seconds (environment): LEASE_BUILD (300), LEASE_TESTS (250, the
# GPU tests, CPU ISA tests and sanitizers run side by side), LEASE_BENCH (170,
# split between the table with host time and the device-time table;
# 0 skips the timing), LEASE_TILES (150, benchmarks/gpu_tiles.py: every tile
# configuration per layer; 0 skips it; LEASE_TILES_ARGS: its arguments, e.g.
# "--ops fwd dx"), LEASE_JOBS (xdist workers for the GPU tests, 6).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${1:-${OUT:-/tmp/detconv-lease}}"
mkdir -p "$LOG"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD:$PWD/tests:$PWD/tests/gpu${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 DETCONV_SKIP_EMU=1
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*"; }

# ------------------------------------------------------------------ environment
{
  say "environment"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -n 2
  g++ --version | head -n 1
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|L2|L3'
  echo "avx512 flags: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  "$PY" -c "import sys, numpy; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  "$PY" -c "import cupy; print('cupy', cupy.__version__)"
  "$PY" -c "import xdist, pytest_timeout; print('pytest-xdist and pytest-timeout present')"
} >"$LOG/env.txt" 2>&1
cat "$LOG/env.txt"

# ------------------------------------------------------------------ build
link_prebuilt() {
  local pre=build-pre cuda ext
  [ -f $pre/libdetconv_gpu.a ] && [ -f $pre/libdetconv_cpu.a ] || { echo "no build-pre/"; return 1; }
  for cuda in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" \
      /usr/local/cuda ""; do
    [ -f "$cuda/include/cuda_runtime_api.h" ] && break
  done
  [ -n "$cuda" ] || { echo "no CUDA toolkit headers found"; return 1; }
  ext="$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")"
  # the flags cmake/pybind.cmake gives the module (pybind11 hides its symbols)
  g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -ffp-contract=off -fno-fast-math \
    -fno-unsafe-math-optimizations -DDETCONV_MODULE_CUDA=1 $("$PY" -m pybind11 --includes) \
    -Icsrc -I"$cuda/include" -I"$cuda/targets/x86_64-linux/include" csrc/python/kernels_module.cc \
    $pre/libdetconv_cpu.a $pre/libdetconv_gpu.a \
    -L"$cuda/lib64" -L"$cuda/targets/x86_64-linux/lib" -lcudart_static -ldl -lrt -lpthread \
    -o "detconv/_kernels$ext"
}
cuda_ok() { "$PY" -c "import detconv.kernels as K; assert K.cuda_available(); print('cuda_available: True')"; }
{
  say "build"
  if timeout 150 bash -c "$(declare -f link_prebuilt); PY='$PY'; link_prebuilt" && cuda_ok; then
    say "linked against build-pre/"
  else
    say "full build"
    rm -f detconv/_kernels*.so
    JOBS=16 DETCONV_CUDA_ARCHS="${DETCONV_CUDA_ARCHS:-90-real}" timeout "${LEASE_BUILD:-300}" scripts/gpu_check.sh build
  fi
  cuda_ok
} >"$LOG/build.log" 2>&1
tail -n 5 "$LOG/build.log"
cuda_ok >/dev/null 2>&1 || { say "no usable build: stopping"; exit 1; }

# ------------------------------------------------------------------ smoke
say "smoke (CUDA_LAUNCH_BLOCKING=1)"
CUDA_LAUNCH_BLOCKING=1 timeout 90 "$PY" tests/gpu/sanitize_driver.py --quick --tiles 0 2>&1 | tail -n 20

# ------------------------------------------------------------------ side by side
budget="${LEASE_TESTS:-250}"
par=(-n "${LEASE_JOBS:-6}"); cpar=(-n 3)
"$PY" -c "import xdist" 2>/dev/null || { par=(); cpar=(); say "no pytest-xdist: tests run serially"; }
say "GPU tests, CPU ISA tests and sanitizers side by side (${budget}s each at most)"
timeout "$budget" "$PY" -m pytest -p no:cacheprovider -v -rfE "${par[@]}" --timeout 150 \
  tests/gpu/test_gpu_bits.py >"$LOG/gpu_tests.log" 2>&1 &
gpu_pid=$!
timeout "$budget" "$PY" -m pytest -p no:cacheprovider -q -rfEs "${cpar[@]}" --timeout 150 \
  tests/test_kernels.py tests/test_reference.py >"$LOG/cpu_tests.log" 2>&1 &
cpu_pid=$!
(
  for spec in "memcheck:" "synccheck:" "racecheck:--quick"; do
    tool="${spec%%:*}"
    args="${spec#*:}"
    (
      rc=0
      timeout "$((budget - 10))" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        "$PY" tests/gpu/sanitize_driver.py $args >"/tmp/san_$tool.log" 2>&1 || rc=$?
      echo "== $tool ${args:-(all problems)}: exit $rc"
      tail -n 25 "/tmp/san_$tool.log"
    ) &
  done
  wait
) >"$LOG/sanitize.log" 2>&1 &
san_pid=$!
wait $gpu_pid; echo "gpu tests exit $?" >>"$LOG/gpu_tests.log"
wait $cpu_pid; echo "cpu tests exit $?" >>"$LOG/cpu_tests.log"
wait $san_pid
say "GPU tests:"; grep -E '^(FAILED|ERROR)' "$LOG/gpu_tests.log" | head -n 30; tail -n 3 "$LOG/gpu_tests.log"
say "CPU ISA tests:"; tail -n 4 "$LOG/cpu_tests.log"
say "sanitizers:"; grep -E '^== |ERROR SUMMARY|sanitize_driver|MISMATCH' "$LOG/sanitize.log"

# ------------------------------------------------------------------ timing (GPU otherwise idle)
if [ "${LEASE_BENCH:-170}" != 0 ]; then
  half=$(( ${LEASE_BENCH:-170} / 2 ))
  say "timing against cuDNN (host time included), then device time only (--queued)"
  { timeout "$half" "$PY" benchmarks/gpu.py --pairs 3; echo "bench exit $?"
    timeout "$half" "$PY" benchmarks/gpu.py --pairs 3 --queued --no-peak; echo "bench --queued exit $?"
  } >"$LOG/bench.log" 2>&1
  grep -A 20 'geometric-mean ratio' "$LOG/bench.log"
fi
if [ "${LEASE_TILES:-150}" != 0 ]; then
  say "device time of every tile configuration"
  timeout "${LEASE_TILES:-150}" "$PY" benchmarks/gpu_tiles.py --fit ${LEASE_TILES_ARGS:-} >"$LOG/tiles.log" 2>&1
  echo "tiles exit $?" >>"$LOG/tiles.log"
  tail -n 24 "$LOG/tiles.log"
fi
say "done"
