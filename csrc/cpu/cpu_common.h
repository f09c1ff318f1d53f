// Host-side pieces shared by the CPU driver and every ISA translation unit.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif
#include "detconv/kernels.h"
#include "detconv/numerics.h"
#include "detconv/order.h"
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DETCONV_X86 1
#endif

namespace detconv {
namespace cpu {

// TensorFlow's CPU threads run with flush-to-zero and denormals-are-zero set;
// the contract honours subnormals, so every shard clears both (and sets the
// rounding its arithmetic needs: round-to-nearest, or the MXCSR rounding
// field `rounding` a vector type asks for) for its duration and restores the
// caller's state.
class FpEnvGuard {
 public:
#ifdef DETCONV_X86
  explicit FpEnvGuard(unsigned rounding = 0) : saved_(_mm_getcsr()) {
    _mm_setcsr((saved_ & ~(0x8040u | 0x6000u)) | 0x1F80u | (rounding & 0x6000u));
  }
  ~FpEnvGuard() { _mm_setcsr(saved_); }
 private:
  unsigned saved_;
#else
  explicit FpEnvGuard(unsigned = 0) {}
#endif
};

// Output tensor of any dtype and layout; put() does the contract's single
// rounding from the accumulator and writes canonical NaNs.
struct OutSpec {
  void* base;
  DType dtype;
  Strides4 s;
  void put(i64 off, float v) const {
    switch (dtype) {
      case DType::kFloat32: static_cast<float*>(base)[off] = canon32(v); break;
      case DType::kFloat16: static_cast<std::uint16_t*>(base)[off] = float_to_half(v); break;
      case DType::kBFloat16: static_cast<std::uint16_t*>(base)[off] = float_to_bf16(v); break;
      case DType::kFloat64: static_cast<double*>(base)[off] = canon64(double(v)); break;  // never used
    }
  }
  void put(i64 off, double v) const { static_cast<double*>(base)[off] = canon64(v); }
};

template <class T>
inline T canonical_nan() {
  return sizeof(T) == 8 ? T(bits_f64(kCanonNaN64)) : T(bits_f32(kCanonNaN32));
}

// One core's L2 in bytes as the system reports it (1 MiB where it does not):
// kernels size their loop order by it, a schedule choice that never moves a bit.
inline i64 l2_cache_bytes() {
  static const i64 bytes = [] {
    long b = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
    b = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return b > 0 ? i64(b) : i64(1) << 20;
  }();
  return bytes;
}

// Whether this CPU is AMD's: the forward's filter prefetch is Intel's (fprop_impl.h), another
// schedule choice that never moves a bit.
inline bool cpu_is_amd() {
#if DETCONV_X86
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
#else
  return false;
#endif
}

// Elements a kernel may read past the last one it uses (whole vectors).
constexpr i64 kPad = 64;

// An NHWC tensor of accumulator values seen as rows of W*C elements. SIMD
// loads may run up to kPad elements past a pixel; that stays inside the
// tensor except on its last row, which therefore comes from a padded copy.
// So float32/float64 NHWC inputs are read in place, never copied whole.
// With a row table, row k is table[k] instead: how a 3-D problem is handed
// to the 2-D kernels as a taller 2-D one (dispatch.cc, "depth as rows").
template <class T>
struct Rows {
  const T* base;
  i64 len;       // elements per row
  i64 last;      // index of the last row
  const T* tail; // the last row, followed by kPad readable elements
  const T* const* table = nullptr;
  const T* zero_row = nullptr;   // a table's row of +0 (padding), if it has one
  const T* row(i64 k) const { return table ? table[k] : (k == last ? tail : base + k * len); }
  bool padded(i64 k) const { return table && table[k] == zero_row; }
};

// A buffer of n elements plus kPad zeros after them (kernels read whole
// vectors past the end), from the framework's allocator when the executor
// offers one: TensorFlow reuses its buffers, so a large one costs no fresh
// pages (page faults) per call. Elements [0, n) are left unset: every user
// writes each one before reading it.
template <class T>
class Workspace {
 public:
  Workspace() = default;
  Workspace(const CpuExecutor& ex, i64 n) {
    ptr_ = static_cast<T*>(ex.scratch((n + kPad) * i64(sizeof(T))));
    if (!ptr_) {
      own_.reset(new T[n + kPad]);
      ptr_ = own_.get();
    }
    std::fill(ptr_ + n, ptr_ + n + kPad, T{});
  }
  T* data() const { return ptr_; }

 private:
  std::unique_ptr<T[]> own_;
  T* ptr_ = nullptr;
};

// A binary16 value as stored in a float16 tensor (its bits). Kernels that
// take Rows<Half16> widen it exactly per vector as they load (V::load).
struct Half16 {
  std::uint16_t bits;
};

// Kernel entry points of one ISA for one accumulator type A: x and dy as
// Rows (rows of W*C), f HWIO and bias (read in bounds only: they are packed first).
template <class A>
struct IsaKernels {
  void (*fprop)(const ConvProblem&, const Rows<A>& x, const A* f, const A* bias, const OutSpec& y, const CpuExecutor&);
  void (*dgrad)(const ConvProblem&, const Rows<A>& dy, const A* f, const OutSpec& dx, const CpuExecutor&);
  // dw and db go through a workspace of P*F parts then combine in chunk order.
  void (*wgrad)(const ConvProblem&, const Rows<A>& x, const Rows<A>& dy, const OutSpec& dw, const CpuExecutor&);
  void (*bgrad)(const ConvProblem&, const Rows<A>& dy, const OutSpec& db, const CpuExecutor&);
  double (*fma_probe)(i64 iters);  // flops done by a dependency-free fma loop (peak measurement)
  // float16 x and dy read in place (NHWC, 2-D) for the problems *_takes_half(p)
  // accepts (kernels_impl.h): layers that stream them once, where widening them
  // into a float copy first would cost about as much as the kernel. Null for float64.
  bool (*fprop_takes_half)(const ConvProblem&);
  bool (*dgrad_takes_half)(const ConvProblem&);
  bool (*wgrad_takes_half)(const ConvProblem&);
  void (*fprop_half)(const ConvProblem&, const Rows<Half16>& x, const A* f, const A* bias, const OutSpec& y,
                     const CpuExecutor&);
  void (*dgrad_half)(const ConvProblem&, const Rows<Half16>& dy, const A* f, const OutSpec& dx, const CpuExecutor&);
  void (*wgrad_half)(const ConvProblem&, const Rows<Half16>& x, const Rows<Half16>& dy, const OutSpec& dw,
                     const CpuExecutor&);
};
struct IsaTable {
  void (*half_to_float)(const std::uint16_t* src, float* dst, i64 n);  // exact, vectorized where the ISA can
  IsaKernels<float> f32;    // float32 accumulation (float32, bfloat16, float16 inputs)
  IsaKernels<double> f64;   // float64
  IsaKernels<float> h16;    // native binary16 accumulation, values held in float
};

IsaTable isa_table_scalar();
IsaTable isa_table_avx2();
IsaTable isa_table_avx512();

}  // namespace cpu
}  // namespace detconv
