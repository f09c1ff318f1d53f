// Emulation stand-in for <cuda_fp16.h> (tests/gpu/emu only): binary16 values
// and the exact IEEE binary16 fma/add of detconv/numerics.h.
#pragma once
#include "cuda_emu.h"
#include "detconv/numerics.h"

struct __half {
  std::uint16_t x;
  __half() = default;
  constexpr explicit __half(std::uint16_t bits, int) : x(bits) {}
  __half(int v) : x(detconv::float_to_half(float(v))) {}  // as CUDA's __half(int)
};
inline __half __ushort_as_half(unsigned short u) { return __half(u, 0); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __half2float(__half h) { return detconv::half_to_float(h.x); }
inline __half __hfma(__half a, __half b, __half c) {
  return __half(detconv::float_to_half(detconv::fma_h16(__half2float(a), __half2float(b), __half2float(c))), 0);
}
inline __half __hadd_rn(__half a, __half b) {
  return __half(detconv::float_to_half(detconv::add_h16(__half2float(a), __half2float(b))), 0);
}
