// The CPU kernels of one ISA: included by kernels_<isa>.cc inside that ISA's
// namespace, after its simd_<isa>.h. One struct per computation on a shared
// base, and the table dispatch.cc picks from.
#include "cpu/kernels_base.h"
#include "cpu/fprop_impl.h"
#include "cpu/dgrad_impl.h"
#include "cpu/wgrad_impl.h"

// The problems whose float16 x and dy the kernels read in place, widened per
// vector as loaded (depthwise 3x3), per unit of pixels (1x1 GEMM) or per chunk
// (1x1 filter gradients past the shared cache): layers that stream them from
// memory, where widening them into float copies of the whole tensors first
// cost about as much as the kernel.
template <class V>
bool fprop_takes_half(const ConvProblem& p) {
  return FpropKernels<V>::dw_sweep_half(p) || FpropKernels<V>::gemm(p);
}
template <class V>
bool dgrad_takes_half(const ConvProblem& p) {
  return DgradKernels<V>::dw_sweep(p) || DgradKernels<V>::grouped_dx_lanes(p) || DgradKernels<V>::gemm(p);
}
template <class V>
bool wgrad_takes_half(const ConvProblem& p) {
  return WgradKernels<V>::dw33(p) || WgradKernels<V>::flat_takes_half(p);
}

template <class V>
IsaKernels<typename V::T> kernel_table() {
  IsaKernels<typename V::T> k{&FpropKernels<V>::fprop, &DgradKernels<V>::dgrad, &WgradKernels<V>::wgrad,
                              &WgradKernels<V>::bgrad, &KernelBase<V>::fma_probe};
  if constexpr (std::is_same<typename V::T, float>::value) {
    k.fprop_takes_half = &fprop_takes_half<V>;
    k.dgrad_takes_half = &dgrad_takes_half<V>;
    k.wgrad_takes_half = &wgrad_takes_half<V>;
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
