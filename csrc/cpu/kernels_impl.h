// The CPU kernels of one ISA: included by kernels_<isa>.cc inside that ISA's
// namespace, after its simd_<isa>.h. One struct per computation on a shared
// base, and the table dispatch.cc picks from.
#include "cpu/kernels_base.h"
#include "cpu/fprop_impl.h"
#include "cpu/dgrad_impl.h"
#include "cpu/wgrad_impl.h"

// The forward passes and filter gradients whose float16 x and dy the kernels
// read in place: depthwise 3x3 of width stride 1 or 2 (memory-bound: widening
// into a copy first cost as much as the kernel).
template <class V>
bool half_direct(const ConvProblem& p) {
  return WgradKernels<V>::dw33(p);
}

// The input gradients that read float16 dy in place, for the same reason: depthwise 3-wide filters of
// width stride 1 or 2 that take channel lanes.
template <class V>
bool half_direct_dx(const ConvProblem& p) {
  return DgradKernels<V>::dw3(p);
}

template <class V>
IsaKernels<typename V::T> kernel_table() {
  IsaKernels<typename V::T> k{&FpropKernels<V>::fprop, &DgradKernels<V>::dgrad, &WgradKernels<V>::wgrad,
                              &WgradKernels<V>::bgrad, &KernelBase<V>::fma_probe};
  if constexpr (std::is_same<typename V::T, float>::value) {
    k.half_direct = &half_direct<V>;
    k.half_direct_dx = &half_direct_dx<V>;
    k.fprop_half = &FpropKernels<V>::fprop_half;
    k.dgrad_half = &DgradKernels<V>::dgrad_half;
    k.wgrad_half = &WgradKernels<V>::wgrad_half;
  }
  return k;
}

// binary16 -> binary32 for a run of values (exact; F16C where the ISA has it).
inline void half_run_to_float(const std::uint16_t* src, float* dst, i64 n) {
  i64 k = 0;
#if defined(__F16C__) || defined(DETCONV_HAVE_F16C)
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))));
#endif
  for (; k < n; ++k) dst[k] = half_to_float(src[k]);
}

inline IsaTable make_table() {
  IsaTable t;
  t.half_to_float = &half_run_to_float;
  t.f32 = kernel_table<VF>();
  t.f64 = kernel_table<VD>();
  t.h16 = kernel_table<VH>();
  return t;
}
