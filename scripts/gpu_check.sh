#!/usr/bin/env bash
# GPU check for a CUDA machine without network and without TensorFlow (nvcc,
# cmake, a C++ compiler, Python with numpy, pytest, pybind11, PyTorch and/or
# CuPy present):
#   1. builds the kernels-only module detconv/_kernels*.so (no TensorFlow) with CUDA,
#   2. runs tests/gpu/ (CPU vs GPU bit equality, repeat/batch/crop invariance)
#      and tests/test_kernels.py when detconv.reference can be imported,
#   3. prints the timing table against cuDNN (benchmarks/gpu.py).
#
# Environment: PYTHON (default python3), DETCONV_CUDA_ARCHS (default: this
# machine's GPUs via nvidia-smi, else the built-in list), JOBS (build jobs),
# BENCH_ARGS (extra arguments for benchmarks/gpu.py, e.g. "--quick"),
# SKIP_BENCH=1, PYTEST_ARGS (extra pytest arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
build="${DETCONV_GPU_BUILD:-build-gpu}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 4)}"

echo "== toolchain"
command -v nvcc >/dev/null || { echo "nvcc not on PATH" >&2; exit 2; }
nvcc --version | tail -n 2
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || true
"$PY" -c "import sys, numpy, pybind11; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'pybind11', pybind11.__version__)"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>/dev/null || echo "no torch"
"$PY" -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null || echo "no cupy"

archs="${DETCONV_CUDA_ARCHS:-}"
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

echo "== tests"
tests=(tests/gpu)
if "$PY" -c "import detconv.reference" 2>/dev/null; then tests+=(tests/test_kernels.py); fi
# The emulation test re-checks tiling on the CPU; the real GPU is here, so skip it by default.
DETCONV_SKIP_EMU="${DETCONV_SKIP_EMU:-1}" "$PY" -m pytest -q -p no:cacheprovider "${tests[@]}" ${PYTEST_ARGS:-}

if [ "${SKIP_BENCH:-0}" != "1" ]; then
  echo "== timing"
  if "$PY" -c "import torch" 2>/dev/null; then
    # shellcheck disable=SC2086
    "$PY" benchmarks/gpu.py ${BENCH_ARGS:-}
  else
    echo "no PyTorch: timing table skipped"
  fi
fi
