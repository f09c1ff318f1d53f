// Shared pieces of the CUDA kernels: one "numerics" policy per (dtype,
// accumulation) pair, error reporting, and small launch helpers.
//
// Every arithmetic operation on an accumulator goes through Num::fma / Num::add,
// which are the explicit round-to-nearest intrinsics (__fmaf_rn, __fma_rn,
// __hfma, __fadd_rn, __dadd_rn, __hadd_rn): the compiler can neither contract
// nor reassociate them, and they honour subnormals (built with --ftz=false).
// Converting an input to the accumulator type is exact; the single final
// rounding uses the host/device helpers of detconv/numerics.h, so the CPU and
// GPU round with literally the same code.
//
// This file includes CUDA headers and csrc/detconv/* only: the kernels never
// see TensorFlow or pybind11.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include "detconv/kernels.h"
#include "detconv/numerics.h"
#include "detconv/order.h"
#include "detconv/problem.h"

namespace detconv {
namespace gpu {

// ------------------------------------------------------------ numerics policies
// T: element type in memory; S: accumulator type (also the type staged in
// shared memory, so each tile converts an input once).
struct NumF32 {
  using T = float;
  using S = float;
  static __device__ __forceinline__ S load(T v) { return v; }
  static __device__ __forceinline__ S zero() { return 0.0f; }
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __fmaf_rn(a, b, c); }
  static __device__ __forceinline__ S add(S a, S b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ T store(S a) { return canon32(a); }
};

struct NumF64 {
  using T = double;
  using S = double;
  static __device__ __forceinline__ S load(T v) { return v; }
  static __device__ __forceinline__ S zero() { return 0.0; }
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __fma_rn(a, b, c); }
  static __device__ __forceinline__ S add(S a, S b) { return __dadd_rn(a, b); }
  static __device__ __forceinline__ T store(S a) { return canon64(a); }
};

// float16 data, float32 accumulator (the default for float16).
struct NumF16A32 {
  using T = std::uint16_t;
  using S = float;
  // cvt.f32.f16 is exact, subnormals included.
  static __device__ __forceinline__ S load(T v) { return __half2float(__ushort_as_half(v)); }
  static __device__ __forceinline__ S zero() { return 0.0f; }
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __fmaf_rn(a, b, c); }
  static __device__ __forceinline__ S add(S a, S b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ T store(S a) { return float_to_half(a); }  // canonical NaN inside
};

// float16 data, native binary16 accumulator (accumulation="float16").
struct NumF16A16 {
  using T = std::uint16_t;
  using S = __half;
  static __device__ __forceinline__ S load(T v) { return __ushort_as_half(v); }
  static __device__ __forceinline__ S zero() { return __ushort_as_half(0); }
  // fma.rn.f16 (no .ftz): one IEEE binary16 fma.
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __hfma(a, b, c); }
  // add.rn.f16 that can never be contracted into an fma.
  static __device__ __forceinline__ S add(S a, S b) { return __hadd_rn(a, b); }
  static __device__ __forceinline__ T store(S a) {
    const std::uint16_t u = __half_as_ushort(a);
    return (u & 0x7FFFu) > 0x7C00u ? kCanonNaN16 : u;
  }
};

// bfloat16 data, float32 accumulator.
struct NumBF16A32 {
  using T = std::uint16_t;
  using S = float;
  static __device__ __forceinline__ S load(T v) { return bf16_to_float(v); }
  static __device__ __forceinline__ S zero() { return 0.0f; }
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __fmaf_rn(a, b, c); }
  static __device__ __forceinline__ S add(S a, S b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ T store(S a) { return float_to_bf16(a); }
};

// Host-side size of the accumulator type of a problem (workspace sizing).
inline std::size_t accum_bytes(const ConvProblem& p) {
  switch (p.dtype) {
    case DType::kFloat64: return 8;
    case DType::kFloat16: return p.accum == Accum::kFloat16 ? 2 : 4;
    default: return 4;
  }
}

// Calls fn(NumX{}) for the problem's (dtype, accumulation). Returns fn's result
// or an error for an unsupported combination.
template <class Fn>
const char* dispatch_num(const ConvProblem& p, Fn&& fn) {
  switch (p.dtype) {
    case DType::kFloat32:
      if (p.accum != Accum::kDefault) return "detconv: accumulation 'float16' needs float16 inputs";
      return fn(NumF32{});
    case DType::kFloat64:
      if (p.accum != Accum::kDefault) return "detconv: accumulation 'float16' needs float16 inputs";
      return fn(NumF64{});
    case DType::kFloat16:
      return p.accum == Accum::kFloat16 ? fn(NumF16A16{}) : fn(NumF16A32{});
    case DType::kBFloat16:
      if (p.accum != Accum::kDefault) return "detconv: accumulation 'float16' needs float16 inputs";
      return fn(NumBF16A32{});
  }
  return "detconv: unknown dtype";
}

// ------------------------------------------------------------------- errors
// Error strings are returned as const char*; CUDA's own strings are static,
// the prefixed copy lives in a per-thread buffer until that thread's next error.
inline const char* cuda_error(const char* where, cudaError_t e) {
  static thread_local char buf[256];
  std::snprintf(buf, sizeof(buf), "detconv %s: CUDA error %s (%s)", where, cudaGetErrorName(e),
                cudaGetErrorString(e));
  return buf;
}

// Checks the launch that just happened (configuration errors surface here;
// asynchronous faults surface at the caller's next synchronisation).
inline const char* check_launch(const char* where) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error(where, e);
}

// Problems the kernels accept: finalized (G, OH, OW consistent) and with every
// extent small enough that 64-bit offsets cannot overflow.
inline const char* check_problem(const ConvProblem& p) {
  if (p.N < 0 || p.H < 0 || p.W < 0 || p.C <= 0 || p.KH <= 0 || p.KW <= 0 || p.Cg <= 0 || p.Co <= 0)
    return "detconv: invalid problem dimensions";
  if (p.G < 1 || p.G * p.Cg != p.C || p.Co % p.G != 0) return "detconv: invalid groups (problem not finalized?)";
  if (p.sh < 1 || p.sw < 1 || p.dh < 1 || p.dw < 1) return "detconv: invalid strides or dilations";
  if (p.OH < 0 || p.OW < 0) return "detconv: invalid output size (problem not finalized?)";
  const i64 lim = i64(1) << 31;  // per-dimension cap; products stay far below 2^63
  if (p.N >= lim || p.H >= lim || p.W >= lim || p.C >= lim || p.Co >= lim || p.KH >= lim || p.KW >= lim ||
      p.OH >= lim || p.OW >= lim)
    return "detconv: a dimension exceeds 2^31";
  return nullptr;
}

// Grid size for grid-stride loops over `tiles` tiles.
inline unsigned grid_for(i64 tiles) {
  const i64 cap = 0x7FFFFFFF;
  return unsigned(tiles < cap ? (tiles < 1 ? 1 : tiles) : cap);
}

__host__ __device__ __forceinline__ i64 min64(i64 a, i64 b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

}  // namespace gpu
}  // namespace detconv
