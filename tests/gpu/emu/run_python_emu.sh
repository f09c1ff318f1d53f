#!/usr/bin/env bash
# Runs tests/gpu/test_gpu_bits.py without a GPU: builds detconv._kernels with
# the CUDA kernels compiled for the host emulator (cuda_emu.h), puts it in a
# scratch copy of the detconv package, and lets a NumPy-backed stand-in for
# CuPy (fakecupy/) drive detconv.kernels' GPU path - Python wrapper, workspace
# allocation, pybind entry points and the kernels' tiling - against the real
# CPU kernels. Slow (one host thread plays every GPU thread); pass pytest
# arguments to pick tests, e.g.
#   tests/gpu/emu/run_python_emu.sh -k "small_shapes"
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${DETCONV_EMU_BUILD:-$root/build-emu}/python"
PY="${PYTHON:-python3}"
CXX="${CXX:-g++}"
mkdir -p "$out/obj" "$out/pkg/detconv"
flags=(-std=c++17 -O2 -fPIC -DDETCONV_CUDA_EMULATION -ffp-contract=off -fno-fast-math -Wno-unknown-pragmas
       -I"$here/include" -I"$root/csrc")
srcs=()
for f in "$root"/cuda/{fprop,dgrad,wgrad,bgrad}.cu "$root"/csrc/cpu/*.cc; do srcs+=("$f"); done
objs=()
pids=()
for f in "${srcs[@]}"; do
  o="$out/obj/$(basename "$f").o"
  objs+=("$o")
  if [[ "$f" == *.cu ]]; then "$CXX" "${flags[@]}" -x c++ -c "$f" -o "$o" & else "$CXX" "${flags[@]}" -O3 -c "$f" -o "$o" & fi
  pids+=($!)
  if (( ${#pids[@]} == 2 )); then for p in "${pids[@]}"; do wait "$p"; done; pids=(); fi
done
for p in "${pids[@]}"; do wait "$p"; done
pyinc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
pbinc=$("$PY" -c "import pybind11; print(pybind11.get_include())")
suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
"$CXX" "${flags[@]}" -fvisibility=hidden -I"$pyinc" -I"$pbinc" -c "$root/csrc/python/kernels_module.cc" -o "$out/obj/module.o"
"$CXX" -shared -o "$out/pkg/detconv/_kernels$suffix" "$out/obj/module.o" "${objs[@]}" -lpthread
cp "$root"/detconv/*.py "$out/pkg/detconv/"
cd "$out"
PYTHONPATH="$out/pkg:$here/fakecupy" exec "$PY" -m pytest -q -p no:cacheprovider "$root/tests/gpu/test_gpu_bits.py" -k cupy "$@"
