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
#include <algorithm>
#include <atomic>
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

// ------------------------------------------------------------ predicated fmas
// c = fma(a, b, c) where `on`, else c untouched. For binary32 one predicated
// FFMA (`@p fma.rn.f32`, the instruction of __fmaf_rn), as cheap as a plain one,
// so the input gradient's threads that skip different taps neither branch nor
// diverge. (ptxas turns a predicated f64 or f16x2 fma into an fma plus selects
// or moves, which cost more than a branch: those accumulators keep the branch.)
__device__ __forceinline__ void fma_if(bool on, float a, float b, float& c) {
#if defined(DETCONV_CUDA_EMULATION)
  if (on) c = __fmaf_rn(a, b, c);
#else
  asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %3, 0;\n\t@p fma.rn.f32 %0, %1, %2, %0;\n\t}"
      : "+f"(c) : "f"(a), "f"(b), "r"(unsigned(on)));
#endif
}

// ------------------------------------------------------------ numerics policies
// T: element type in memory; S: accumulator type (also the type staged in
// shared memory, so each tile converts an input once).
// kPacked: the accumulator has a two-lane SIMD form (S2, fma2) whose lanes
// are two different outputs, each an IEEE operation of its own (HFMA2).
struct NumF32 {
  using T = float;
  using S = float;
  static constexpr bool kPacked = false;
  static __device__ __forceinline__ S load(T v) { return v; }
  static __device__ __forceinline__ S zero() { return 0.0f; }
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __fmaf_rn(a, b, c); }
  static __device__ __forceinline__ S add(S a, S b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ T store(S a) { return canon32(a); }
};

struct NumF64 {
  using T = double;
  using S = double;
  static constexpr bool kPacked = false;
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
  static constexpr bool kPacked = false;
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
  using S2 = __half2;
  static constexpr bool kPacked = true;
  static __device__ __forceinline__ S load(T v) { return __ushort_as_half(v); }
  static __device__ __forceinline__ S zero() { return __ushort_as_half(0); }
  // fma.rn.f16 (no .ftz): one IEEE binary16 fma.
  static __device__ __forceinline__ S fma(S a, S b, S c) { return __hfma(a, b, c); }
  // add.rn.f16 that can never be contracted into an fma.
  static __device__ __forceinline__ S add(S a, S b) { return __hadd_rn(a, b); }
  // fma.rn.f16x2: lane-wise the same IEEE binary16 fma as fma() (no .ftz).
  static __device__ __forceinline__ S2 fma2(S2 a, S2 b, S2 c) { return __hfma2(a, b, c); }
  static __device__ __forceinline__ S2 splat(S a) { return __half2half2(a); }
  static __device__ __forceinline__ T store(S a) {
    const std::uint16_t u = __half_as_ushort(a);
    return (u & 0x7FFFu) > 0x7C00u ? kCanonNaN16 : u;
  }
};

// bfloat16 data, float32 accumulator.
struct NumBF16A32 {
  using T = std::uint16_t;
  using S = float;
  static constexpr bool kPacked = false;
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
  if (p.N < 0 || p.D < 0 || p.H < 0 || p.W < 0 || p.C <= 0 || p.KD <= 0 || p.KH <= 0 || p.KW <= 0 || p.Cg <= 0 ||
      p.Co < 0)
    return "detconv: invalid problem dimensions";
  if (p.G < 1 || p.G * p.Cg != p.C || p.Co % p.G != 0) return "detconv: invalid groups (problem not finalized?)";
  if (p.sh < 1 || p.sw < 1 || p.sd < 1 || p.dh < 1 || p.dw < 1 || p.dd < 1)
    return "detconv: invalid strides or dilations";
  if (p.OD < 0 || p.OH < 0 || p.OW < 0) return "detconv: invalid output size (problem not finalized?)";
  const i64 lim = i64(1) << 31;  // per-dimension cap
  const i64 dims[] = {p.N, p.D, p.H, p.W, p.C, p.Co, p.KD, p.KH, p.KW, p.OD, p.OH, p.OW,
                      p.sd, p.sh, p.sw, p.dd, p.dh, p.dw, p.pf, p.pt, p.pl};
  for (i64 d : dims)
    if (d >= lim || d < 0) return "detconv: a dimension, stride, dilation or padding exceeds 2^31";
  // Element counts (and so every offset the kernels form) within finalize_problem's bound.
  i64 n;
  if (!problem_detail::count({p.N, p.C, p.D, p.H, p.W}, &n) || !problem_detail::count({p.N, p.Co, p.OD, p.OH, p.OW}, &n) ||
      !problem_detail::count({p.KD, p.KH, p.KW, p.Cg, p.Co}, &n))
    return "detconv: tensor too large";
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
  if (p.N < 0 || p.OD < 0 || p.OH < 0 || p.OW < 0 || p.Co < 0) return "detconv: invalid problem dimensions";
  const i64 lim = i64(1) << 31;
  if (p.N >= lim || p.OD >= lim || p.OH >= lim || p.OW >= lim || p.Co >= lim) return "detconv: a dimension exceeds 2^31";
  i64 n;
  if (!problem_detail::count({p.N, p.Co, p.OD, p.OH, p.OW}, &n)) return "detconv: tensor too large";
  return nullptr;
}

// About two blocks of 256 threads per SM of a large GPU (132 SMs on an H100
// SXM): the combine takes one thread per output from this many outputs on.
constexpr i64 kFewThreads = 264 * 256;

// Multiprocessors of the current device (read once per device; 132 if unknown
// and under the emulator). Tile choices use it; bits never depend on it.
inline int sm_count() {
#if defined(DETCONV_CUDA_EMULATION)
  return 132;
#else
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return 132;
  }
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n > 0) return n;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 132;
  }
  cached[dev].store(n, std::memory_order_relaxed);
  return n;
#endif
}

// Testing knob: DETCONV_CUDA_TILE=<digit> forces tile configuration number
// (digit mod the launcher's configuration count) for every launch, so tests
// can run each configuration on any problem. Unset: chosen by the problem's
// shape. Tile configurations never change a bit.
inline int forced_tile(int count) {
  const char* v = std::getenv("DETCONV_CUDA_TILE");
  if (v == nullptr || v[0] < '0' || v[0] > '9' || v[1] != 0 || count <= 0) return -1;
  return (v[0] - '0') % count;
}

// Grid size for grid-stride loops over `tiles` tiles.
inline unsigned grid_for(i64 tiles) {
  const i64 cap = 0x7FFFFFFF;
  return unsigned(tiles < cap ? (tiles < 1 ? 1 : tiles) : cap);
}

__host__ __device__ __forceinline__ i64 min64(i64 a, i64 b) { return a < b ? a : b; }

// Index arithmetic. Kernels are compiled twice: with I = int when every
// coordinate, index and element count of the problem fits (fits_int32: all
// real layers; divisions are then short 32-bit sequences, no 64-bit division
// calls, half the registers), and with I = i64 for the rest. Offsets into a
// tensor are formed in I too (StridesI): with I = int every one fits.
inline bool fits_int32(const ConvProblem& p) {
  const double lim = double(1 << 30);
  auto span = [](i64 size, i64 k, i64 dil, i64 pa, i64 pb, i64 out, i64 stride) {
    return double(size) + double(pa) + double(pb) + double(k) * double(dil) + double(out) * double(stride);
  };
  const double vals[] = {double(p.N) * double(p.C) * double(p.D) * double(p.H) * double(p.W),
                         double(p.N) * double(p.Co) * double(p.OD) * double(p.OH) * double(p.OW),
                         double(p.KD) * double(p.KH) * double(p.KW) * double(p.Cg) * double(p.Co) + double(1 << 23),
                         span(p.D, p.KD, p.dd, p.pf, p.pk, p.OD, p.sd),
                         span(p.H, p.KH, p.dh, p.pt, p.pb, p.OH, p.sh),
                         span(p.W, p.KW, p.dw, p.pl, p.pr, p.OW, p.sw),
                         // every GEMM tile count: pixel tiles (>= 64 pixels) x channel tiles (>= 32 columns,
                         // so with the groups at most C + Co + 1) x stride phases
                         (std::max(double(p.N) * double(p.D) * double(p.H) * double(p.W),
                                   double(p.N) * double(p.OD) * double(p.OH) * double(p.OW)) / 64 + 1) *
                             (double(p.C) + double(p.Co) + 1) * double(p.sd) * double(p.sh) * double(p.sw)};
  for (double v : vals)
    if (!(v < lim)) return false;
  return true;
}

// q = a / b, r = a % b for a >= 0, b > 0 (unsigned 32-bit for I = int).
template <class I>
__host__ __device__ __forceinline__ void divmod(I a, I b, I& q, I& r) {
  if constexpr (sizeof(I) == 4) {
    const unsigned uq = unsigned(a) / unsigned(b);
    q = I(uq);
    r = I(unsigned(a) - uq * unsigned(b));
  } else {
    q = a / b;
    r = a - q * b;
  }
}

// Decodes a flat index m over (n, d, h, w) with extents (.., D, H, W).
template <class I>
struct Coord4 {
  I n, d, h, w;
};
template <class I>
__host__ __device__ __forceinline__ Coord4<I> decode4(I m, I D, I H, I W) {
  Coord4<I> c;
  I t;
  divmod(m, W, t, c.w);
  divmod(t, H, t, c.h);
  divmod(t, D, c.n, c.d);
  return c;
}

// Element strides in the index type: with I = int every offset into a tensor
// (and the workspace) fits, so offsets are formed in 32 bits.
template <class I>
struct StridesI {
  I n, d, h, w, c;
  __host__ __device__ __forceinline__ explicit StridesI(const Strides4& s)
      : n(I(s.n)), d(I(s.d)), h(I(s.h)), w(I(s.w)), c(I(s.c)) {}
  __host__ __device__ __forceinline__ I at(I in, I id, I ih, I iw, I ic) const {
    return in * n + id * d + ih * h + iw * w + ic * c;
  }
};

// Calls fn(I{}) with I = int when the problem fits 32-bit indexing, else i64.
// Testing knob: DETCONV_CUDA_INDEX64=1 takes the 64-bit path for every problem.
template <class Fn>
const char* dispatch_index(const ConvProblem& p, Fn&& fn) {
  const char* force = std::getenv("DETCONV_CUDA_INDEX64");
  const bool wide = (force != nullptr && force[0] == '1') || !fits_int32(p);
  return wide ? fn(i64(0)) : fn(int(0));
}

}  // namespace gpu
}  // namespace detconv
