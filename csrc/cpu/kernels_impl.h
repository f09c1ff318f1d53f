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

// The forward's 1x1 GEMM (FpropKernels::fprop_gemm) reading the filter transposed: the input gradient's
// 1x1 path, run on dy (DgradKernels::dgrad_gemm). Compiled with the forward kernels only, for the (V, S)
// pairs below; the input gradient's unit calls it (the GEMM compiled in both units was most of the
// code they shared: 99 of the AVX2 input-gradient unit's 1106 KB).
template <class V, class S>
void fprop_gemm_transposed(const ConvProblem& p, const Rows<S>& x, const typename V::T* f, const OutSpec& y,
                           const CpuExecutor& ex);

#ifdef DETCONV_CPU_PART_FPROP
#include "cpu/fprop_impl.h"
#endif
#ifdef DETCONV_CPU_PART_DGRAD
#include "cpu/dgrad_impl.h"
#endif
#ifdef DETCONV_CPU_PART_WGRAD
#include "cpu/wgrad_impl.h"
#endif

// fill(V{}, kernels) for each accumulator's vector type: float32 (VF), float64 (VD), native
// float16 (VH).
template <class Fill>
void fill_lanes(IsaTable& t, Fill fill) {
  fill(VF{}, t.f32);
  fill(VD{}, t.f64);
  fill(VH{}, t.h16);
}

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
void add_fprop(IsaTable& t) {
  fill_lanes(t, [](auto lanes, auto& k) {
    using V = decltype(lanes);
    k.fprop = &FpropKernels<V>::fprop;
    if constexpr (std::is_same<typename V::T, float>::value) {
      k.fprop_takes_half = &fprop_takes_half<V>;
      k.fprop_half = &FpropKernels<V>::fprop_half;
    }
  });
}
template <class V, class S>
void fprop_gemm_transposed(const ConvProblem& p, const Rows<S>& x, const typename V::T* f, const OutSpec& y,
                           const CpuExecutor& ex) {
  FpropKernels<V>::template fprop_gemm<S>(p, x, f, nullptr, y, ex, true);
}
// Those dgrad_gemm runs: each accumulator type on its own dy (dgrad), float16 dy in place (dgrad_half).
template void fprop_gemm_transposed<VF, float>(const ConvProblem&, const Rows<float>&, const float*,
                                               const OutSpec&, const CpuExecutor&);
template void fprop_gemm_transposed<VF, Half16>(const ConvProblem&, const Rows<Half16>&, const float*,
                                                const OutSpec&, const CpuExecutor&);
template void fprop_gemm_transposed<VD, double>(const ConvProblem&, const Rows<double>&, const double*,
                                                const OutSpec&, const CpuExecutor&);
template void fprop_gemm_transposed<VH, float>(const ConvProblem&, const Rows<float>&, const float*,
                                               const OutSpec&, const CpuExecutor&);
template void fprop_gemm_transposed<VH, Half16>(const ConvProblem&, const Rows<Half16>&, const float*,
                                                const OutSpec&, const CpuExecutor&);
#endif

#ifdef DETCONV_CPU_PART_DGRAD
template <class V>
bool dgrad_takes_half(const ConvProblem& p) {
  return DgradKernels<V>::dw_sweep(p) || DgradKernels<V>::grouped_dx_lanes(p) || DgradKernels<V>::gemm(p);
}
void add_dgrad(IsaTable& t) {
  fill_lanes(t, [](auto lanes, auto& k) {
    using V = decltype(lanes);
    k.dgrad = &DgradKernels<V>::dgrad;
    if constexpr (std::is_same<typename V::T, float>::value) {
      k.dgrad_takes_half = &dgrad_takes_half<V>;
      k.dgrad_half = &DgradKernels<V>::dgrad_half;
    }
  });
}
#endif

#ifdef DETCONV_CPU_PART_WGRAD
template <class V>
bool wgrad_takes_half(const ConvProblem& p) {
  return WgradKernels<V>::dw33(p) || WgradKernels<V>::flat_takes_half(p);
}
void add_wgrad(IsaTable& t) {
  fill_lanes(t, [](auto lanes, auto& k) {
    using V = decltype(lanes);
    k.wgrad = &WgradKernels<V>::wgrad;
    k.bgrad = &WgradKernels<V>::bgrad;
    if constexpr (std::is_same<typename V::T, float>::value) {
      k.wgrad_takes_half = &wgrad_takes_half<V>;
      k.wgrad_half = &WgradKernels<V>::wgrad_half;
    }
  });
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
  fill_lanes(t, [](auto lanes, auto& k) { k.fma_probe = &KernelBase<decltype(lanes)>::fma_probe; });
  add_fprop(t);
  add_dgrad(t);
  add_wgrad(t);
  return t;
}
#endif
