// The CPU kernels of one ISA: included by kernels_<isa>.cc inside that ISA's
// namespace, after its simd_<isa>.h. One struct per computation on a shared
// base, and the table dispatch.cc picks from.
//
// CMakeLists.txt compiles each kernels_<isa>.cc as four units, one per part, so
// that an ISA's minutes of compiling spread over the cores: DETCONV_CPU_PART_FPROP,
// _DGRAD and _WGRAD each compile one computation with its table entries
// (add_fprop, add_dgrad, add_wgrad), _TABLE the table that gathers them.
#if defined(DETCONV_CPU_PART_FPROP) + defined(DETCONV_CPU_PART_DGRAD) + defined(DETCONV_CPU_PART_WGRAD) + \
        defined(DETCONV_CPU_PART_TABLE) != 1
#error "compile kernels_<isa>.cc with one of DETCONV_CPU_PART_FPROP, _DGRAD, _WGRAD, _TABLE defined (CMakeLists.txt)"
#endif
#include "cpu/kernels_base.h"
#if defined(DETCONV_CPU_PART_FPROP) || defined(DETCONV_CPU_PART_DGRAD)
#include "cpu/fprop_impl.h"  // (the input gradient's 1x1 path is the forward's GEMM)
#endif
#ifdef DETCONV_CPU_PART_DGRAD
#include "cpu/dgrad_impl.h"
#endif
#ifdef DETCONV_CPU_PART_WGRAD
#include "cpu/wgrad_impl.h"
#endif

// The problems whose float16 x and dy the kernels read in place, widened per
// vector as loaded (depthwise 3x3), per unit of pixels (1x1 GEMM) or per chunk
// (1x1 filter gradients past the shared cache): layers that stream them from
// memory, where widening them into float copies of the whole tensors first
// cost about as much as the kernel. Set for the float lanes (VF, VH) only.
#ifdef DETCONV_CPU_PART_FPROP
template <class V>
bool fprop_takes_half(const ConvProblem& p) {
  return FpropKernels<V>::dw_sweep_half(p) || FpropKernels<V>::gemm(p);
}
template <class V>
void add_fprop(IsaKernels<typename V::T>& k) {
  k.fprop = &FpropKernels<V>::fprop;
  if constexpr (std::is_same<typename V::T, float>::value) {
    k.fprop_takes_half = &fprop_takes_half<V>;
    k.fprop_half = &FpropKernels<V>::fprop_half;
  }
}
void add_fprop(IsaTable& t) {
  add_fprop<VF>(t.f32);
  add_fprop<VD>(t.f64);
  add_fprop<VH>(t.h16);
}
#endif

#ifdef DETCONV_CPU_PART_DGRAD
template <class V>
bool dgrad_takes_half(const ConvProblem& p) {
  return DgradKernels<V>::dw_sweep(p) || DgradKernels<V>::grouped_dx_lanes(p) || DgradKernels<V>::gemm(p);
}
template <class V>
void add_dgrad(IsaKernels<typename V::T>& k) {
  k.dgrad = &DgradKernels<V>::dgrad;
  if constexpr (std::is_same<typename V::T, float>::value) {
    k.dgrad_takes_half = &dgrad_takes_half<V>;
    k.dgrad_half = &DgradKernels<V>::dgrad_half;
  }
}
void add_dgrad(IsaTable& t) {
  add_dgrad<VF>(t.f32);
  add_dgrad<VD>(t.f64);
  add_dgrad<VH>(t.h16);
}
#endif

#ifdef DETCONV_CPU_PART_WGRAD
template <class V>
bool wgrad_takes_half(const ConvProblem& p) {
  return WgradKernels<V>::dw33(p) || WgradKernels<V>::flat_takes_half(p);
}
template <class V>
void add_wgrad(IsaKernels<typename V::T>& k) {
  k.wgrad = &WgradKernels<V>::wgrad;
  k.bgrad = &WgradKernels<V>::bgrad;
  if constexpr (std::is_same<typename V::T, float>::value) {
    k.wgrad_takes_half = &wgrad_takes_half<V>;
    k.wgrad_half = &WgradKernels<V>::wgrad_half;
  }
}
void add_wgrad(IsaTable& t) {
  add_wgrad<VF>(t.f32);
  add_wgrad<VD>(t.f64);
  add_wgrad<VH>(t.h16);
}
#endif

#ifdef DETCONV_CPU_PART_TABLE
// binary16 -> binary32 for a run of values (exact; F16C where the ISA has it).
inline void half_run_to_float(const std::uint16_t* src, float* dst, i64 n) {
  i64 k = 0;
#if defined(__F16C__) || defined(DETCONV_HAVE_F16C)
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))));
#endif
  for (; k < n; ++k) dst[k] = half_to_float(src[k]);
}

void add_fprop(IsaTable& t);  // (defined by the other parts)
void add_dgrad(IsaTable& t);
void add_wgrad(IsaTable& t);

inline IsaTable make_table() {
  IsaTable t{};  // (a part's fields it does not set stay null)
  t.half_to_float = &half_run_to_float;
  t.f32.fma_probe = &KernelBase<VF>::fma_probe;
  t.f64.fma_probe = &KernelBase<VD>::fma_probe;
  t.h16.fma_probe = &KernelBase<VH>::fma_probe;
  add_fprop(t);
  add_dgrad(t);
  add_wgrad(t);
  return t;
}
#endif
