#!/usr/bin/env bash
# GPU check for a CUDA machine without network and without TensorFlow (nvcc,
# cmake, a C++ compiler, Python with numpy, pytest, pybind11, PyTorch and/or
# CuPy present). Runs in phases, each short enough for one 10-minute command:
#
#   scripts/gpu_check.sh build      builds the kernels-only module detconv/_kernels*.so
#                                   (no TensorFlow) with CUDA for this machine's GPUs
#   scripts/gpu_check.sh test       GPU tests only (tests/gpu/test_*.py but the CPU
#                                   emulation test): CPU vs GPU bits, forced tile
#                                   configurations, repeat/batch/crop invariance
#   scripts/gpu_check.sh sanitize   compute-sanitizer memcheck, racecheck and synccheck
#                                   over tests/gpu/sanitize_driver.py (every tile config)
#   scripts/gpu_check.sh bench      timing table against cuDNN (benchmarks/gpu.py)
#   scripts/gpu_check.sh [all]      all four in order
#
# Every phase but build expects a finished build. Arguments after the phase go
# to pytest (test), to the driver (sanitize) or to benchmarks/gpu.py (bench).
#
# Environment: PYTHON (default python3), DETCONV_CUDA_ARCHS (default: this
# machine's GPUs via nvidia-smi, else the built-in list), JOBS (build jobs),
# PYTEST_ARGS (extra pytest arguments, shell-quoted, to split the test phase, e.g.
#   PYTEST_ARGS='-k "small_shapes or forced_tile or float16_accumulation"' and
#   PYTEST_ARGS='-k "not (small_shapes or forced_tile or float16_accumulation)"'),
# PYTEST_TIMEOUT (seconds per test, default 300; needs pytest-timeout),
# SANITIZE_TOOLS (default "memcheck racecheck synccheck"; one tool per call to
# split the phase), SANITIZE_ARGS (driver arguments, e.g. "--quick --tiles 0,3"),
# BENCH_ARGS (extra arguments for benchmarks/gpu.py, e.g. "--quick"), SKIP_BENCH=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
build="${DETCONV_GPU_BUILD:-build-gpu}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

phase="${1:-all}"
[ $# -gt 0 ] && shift
case "$phase" in
  build|test|sanitize|bench|all) ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "usage: $0 [build|test|sanitize|bench|all] [args...]" >&2; exit 2 ;;
esac
# split a shell-quoted string into words (PYTEST_ARGS may hold quoted -k expressions)
words() { eval "printf '%s\0' $1"; }

need_build() {
  "$PY" -c "import detconv.kernels as K; assert K.cuda_available(), 'detconv CUDA kernels not built or no device visible'" \
    || { echo "== $phase: run '$0 build' first" >&2; exit 2; }
}

phase_build() {
  echo "== toolchain"
  command -v nvcc >/dev/null || { echo "nvcc not on PATH" >&2; exit 2; }
  nvcc --version | tail -n 2
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || true
  "$PY" -c "import sys, numpy, pybind11; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'pybind11', pybind11.__version__)"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>/dev/null || echo "no torch"
  "$PY" -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null || echo "no cupy"

  local archs="${DETCONV_CUDA_ARCHS:-}" newest
  if [ -z "$archs" ] && command -v nvidia-smi >/dev/null; then
    # e.g. "9.0" -> "90-real"; plus PTX of the newest one
    archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u | sed 's/$/-real/' | paste -sd';' || true)
    newest=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -n | tail -n 1 || true)
    [ -n "$newest" ] && archs="$archs;$newest-virtual"
  fi
  echo "== build (DETCONV_WITH_TF=OFF, CUDA archs: ${archs:-default})"
  cmake -S . -B "$build" -DDETCONV_WITH_TF=OFF -DDETCONV_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v "$PY")" ${archs:+-DDETCONV_CUDA_ARCHS="$archs"}
  cmake --build "$build" --parallel "$jobs"
  "$PY" -c "import detconv.kernels as K; assert K.cuda_available(), 'CUDA kernels built but no device visible'; print('cuda_available: True')"
}

phase_test() {
  echo "== tests (GPU only)"
  need_build
  local tests=() f extra=() opts=(-q -p no:cacheprovider)
  for f in tests/gpu/test_*.py; do
    # the emulation test re-checks tiling on the CPU: not a GPU test
    [ "$(basename "$f")" = test_emulation.py ] || tests+=("$f")
  done
  if "$PY" -c "import pytest_timeout" 2>/dev/null; then
    opts+=("--timeout=${PYTEST_TIMEOUT:-300}")
  else
    echo "note: pytest-timeout is not installed; running without --timeout"
  fi
  if [ -n "${PYTEST_ARGS:-}" ]; then mapfile -d '' extra < <(words "$PYTEST_ARGS"); fi
  DETCONV_SKIP_EMU="${DETCONV_SKIP_EMU:-1}" "$PY" -m pytest "${opts[@]}" "${tests[@]}" "${extra[@]}" "$@"
}

phase_sanitize() {
  echo "== compute-sanitizer"
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer is not on PATH: sanitize phase skipped"
    return 0
  fi
  need_build
  compute-sanitizer --version | tail -n 1
  local tool rc status=0 log extra=()
  if [ -n "${SANITIZE_ARGS:-}" ]; then mapfile -d '' extra < <(words "$SANITIZE_ARGS"); fi
  log="$(mktemp)"
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    echo "-- $tool"
    rc=0
    compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$PY" tests/gpu/sanitize_driver.py "${extra[@]}" "$@" >"$log" 2>&1 || rc=$?
    grep -v 'SUMMARY' "$log" | tail -n 40
    if grep -q 'SUMMARY' "$log"; then
      grep 'SUMMARY' "$log" | sed "s/^========= /$tool: /"
    else
      echo "$tool: no ERROR SUMMARY line (exit $rc)"
    fi
    [ "$rc" -eq 0 ] || { echo "$tool: FAILED (exit $rc)"; status=1; }
  done
  rm -f "$log"
  return "$status"
}

phase_bench() {
  if [ "${SKIP_BENCH:-0}" = "1" ]; then echo "== timing skipped (SKIP_BENCH=1)"; return 0; fi
  echo "== timing"
  need_build
  if "$PY" -c "import torch" 2>/dev/null; then
    local extra=()
    if [ -n "${BENCH_ARGS:-}" ]; then mapfile -d '' extra < <(words "$BENCH_ARGS"); fi
    "$PY" benchmarks/gpu.py "${extra[@]}" "$@"
  else
    echo "no PyTorch: timing table skipped"
  fi
}

case "$phase" in
  build) phase_build ;;
  test) phase_test "$@" ;;
  sanitize) phase_sanitize "$@" ;;
  bench) phase_bench "$@" ;;
  all)
    phase_build
    status=0
    phase_test "$@" || status=1
    phase_sanitize || status=1
    phase_bench || status=1
    exit "$status"
    ;;
esac
