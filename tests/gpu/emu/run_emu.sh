#!/usr/bin/env bash
# Builds the CUDA kernels of cuda/ as host C++ under the emulator in this folder
# and checks them bit for bit against the contract's loop nests.
#   tests/gpu/emu/run_emu.sh [cases] [seed]      (needs only g++)
# DETCONV_EMU_SANITIZE=1 builds with AddressSanitizer and UBSan (out-of-bounds
# reads and writes of the kernels' global buffers, misaligned or overflowing
# index arithmetic), into emu_test_asan.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${DETCONV_EMU_BUILD:-$root/build-emu}"
mkdir -p "$out"
CXX="${CXX:-g++}"
flags=(-std=c++17 -g0 -DDETCONV_CUDA_EMULATION -ffp-contract=off -fno-fast-math -Wall -Wno-unknown-pragmas
       -I"$here/include" -I"$root/csrc")
name=emu_test
if [ "${DETCONV_EMU_SANITIZE:-0}" = "1" ]; then
  flags+=(-O0 -fsanitize=address,undefined -fno-sanitize-recover=undefined)  # -O1 compiles 3.7x slower
  name=emu_test_asan
else
  flags+=(-O1)  # -O2 compiled 1.5x longer (135 against 92 CPU-s) and ran the cases no faster
fi
objs=()
# two compilers at a time; any failure stops the script
for pair in "fprop dgrad" "wgrad bgrad"; do
  pids=()
  for f in $pair; do
    "$CXX" "${flags[@]}" -x c++ -c "$root/cuda/$f.cu" -o "$out/${name}_$f.o" & pids+=($!)
    objs+=("$out/${name}_$f.o")
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
"$CXX" "${flags[@]}" -c "$here/emu_test.cc" -o "$out/${name}_main.o"
"$CXX" "${flags[@]}" -o "$out/$name" "$out/${name}_main.o" "${objs[@]}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_stack_use_after_return=0:detect_leaks=0}"
exec "$out/$name" "$@"
