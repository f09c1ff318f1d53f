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
#include <cstdlib>
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

// Launches kernel<<<grid, block, 0, stream>>>(args...) and checks the launch.
// Built with DETCONV_CUDA_EMULATION (tests/gpu/emu), the same kernel runs on
// the host under a cooperative thread emulator instead, so that the tiling
// and indexing logic can be tested bit for bit on a machine without a GPU.
template <class... KArgs, class... Args>
const char* launch(void (*kernel)(KArgs...), unsigned grid, unsigned block, cudaStream_t stream, const char* where,
                   Args&&... args) {
#if defined(DETCONV_CUDA_EMULATION)
  (void)stream;
  (void)where;
  emu::run_grid(grid, block, [&] { kernel(KArgs(args)...); });
  return nullptr;
#else
  kernel<<<grid, block, 0, stream>>>(KArgs(args)...);
  return check_launch(where);
#endif
}

// Makes the stream's device current for the launches of one entry point and
// restores the caller's device afterwards, so a caller whose current device
// differs from its stream's (a framework thread serving several GPUs) still
// launches on the right one. The legacy default stream (nullptr) means "the
// current device" and is left alone.
class DeviceGuard {
 public:
  explicit DeviceGuard(cudaStream_t stream) {
#if !defined(DETCONV_CUDA_EMULATION) && CUDART_VERSION >= 12080
    int dev = -1;
    if (stream != nullptr && cudaStreamGetDevice(stream, &dev) == cudaSuccess && cudaGetDevice(&prev_) == cudaSuccess &&
        dev != prev_) {
      if (cudaSetDevice(dev) == cudaSuccess) switched_ = true;
    }
    cudaGetLastError();  // a stream the runtime cannot map is reported by the launch itself
#else
    (void)stream;
#endif
  }
  ~DeviceGuard() {
#if !defined(DETCONV_CUDA_EMULATION)
    if (switched_) cudaSetDevice(prev_);
#endif
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool switched_ = false;
};

// Bias gradients read only the output-shaped part of a problem (N, OH, OW, Co,
// layout, dtype, accumulation): the TensorFlow op fills nothing else.
inline const char* check_bgrad_problem(const ConvProblem& p) {
  if (p.N < 0 || p.OH < 0 || p.OW < 0 || p.Co < 0) return "detconv: invalid problem dimensions";
  const i64 lim = i64(1) << 31;
  if (p.N >= lim || p.OH >= lim || p.OW >= lim || p.Co >= lim) return "detconv: a dimension exceeds 2^31";
  return nullptr;
}

// Below this many blocks a kernel switches to smaller tiles (about two blocks
// per SM of a large GPU).
constexpr i64 kFewBlocks = 264;

// Testing knob: DETCONV_CUDA_TILE=0|1|2 forces one tile shape for every launch
// (conv: wide, narrow, small; wgrad: wide, few rows, few columns), so tests can
// run each shape on any problem. Unset: chosen by the problem's shape. Tile
// shapes never change a bit.
inline int forced_tile() {
  const char* v = std::getenv("DETCONV_CUDA_TILE");
  if (v == nullptr || v[0] < '0' || v[0] > '2' || v[1] != 0) return -1;
  return v[0] - '0';
}

// Grid size for grid-stride loops over `tiles` tiles.
inline unsigned grid_for(i64 tiles) {
  const i64 cap = 0x7FFFFFFF;
  return unsigned(tiles < cap ? (tiles < 1 ? 1 : tiles) : cap);
}

__host__ __device__ __forceinline__ i64 min64(i64 a, i64 b) { return a < b ? a : b; }

// The output columns of column tile jt: groups g_lo .. g_lo+gbe-1 and, in each,
// columns j0 .. j0+to-1 of its Jg. Either a tile splits one group (geo.gb == 1,
// geo.jt_per_group tiles of TJ columns per group) or packs geo.gb whole groups.
struct ColumnTile {
  i64 g_lo, j0, to, gbe;
};
template <int TJ, class Geo>
__host__ __device__ __forceinline__ ColumnTile column_tile(const Geo& geo, i64 jt, i64 Jg, i64 G) {
  ColumnTile c;
  if (geo.gb == 1) {
    c.g_lo = jt / geo.jt_per_group;
    c.j0 = (jt % geo.jt_per_group) * TJ;
    c.to = min64(TJ, Jg - c.j0);
    c.gbe = 1;
  } else {
    c.g_lo = jt * geo.gb;
    c.j0 = 0;
    c.to = Jg;
    c.gbe = min64(geo.gb, G - c.g_lo);
  }
  return c;
}
__host__ __device__ __forceinline__ i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

}  // namespace gpu
}  // namespace detconv
