#!/usr/bin/env bash
# Builds the CUDA kernels of cuda/ as host C++ under the emulator in this folder
# and checks them bit for bit against the contract's loop nests.
#   tests/gpu/emu/run_emu.sh [cases] [seed]      (needs only g++)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${DETCONV_EMU_BUILD:-$root/build-emu}"
mkdir -p "$out"
CXX="${CXX:-g++}"
flags=(-std=c++17 -O2 -g0 -DDETCONV_CUDA_EMULATION -ffp-contract=off -fno-fast-math -Wall -Wno-unknown-pragmas
       -I"$here/include" -I"$root/csrc")
objs=()
# two compilers at a time; any failure stops the script
for pair in "fprop dgrad" "wgrad bgrad"; do
  pids=()
  for f in $pair; do
    "$CXX" "${flags[@]}" -x c++ -c "$root/cuda/$f.cu" -o "$out/emu_$f.o" & pids+=($!)
    objs+=("$out/emu_$f.o")
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
"$CXX" "${flags[@]}" -c "$here/emu_test.cc" -o "$out/emu_test.o"
"$CXX" -o "$out/emu_test" "$out/emu_test.o" "${objs[@]}"
exec "$out/emu_test" "$@"
