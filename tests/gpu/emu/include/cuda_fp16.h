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

// Two binary16 lanes; __hfma2 is lane-wise the IEEE binary16 fma (as fma.rn.f16x2).
struct __half2 {
  __half x, y;
};
inline __half2 __half2half2(__half a) { return __half2{a, a}; }
inline __half __low2half(__half2 a) { return a.x; }
inline __half __high2half(__half2 a) { return a.y; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }
