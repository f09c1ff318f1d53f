// AVX-512F vectors. Included inside namespace detconv::cpu::avx512, under
// #pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c").

struct VF {
  using T = float;
  using R = __m512;
  static constexpr int L = 16, kPW = 6, kNV = 2, kTI = 8;  // 12 accumulators (dense dw tiles: 16) of 32 registers
  static constexpr bool kSubRuns = true;  // dw tiles in sub-runs past L2 (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = true;  // depthwise column sweeps (KernelBase::dw_sweeps)
  static constexpr int kPF = 8, kPG = 8, kPD = 8;  // dense forward, 1x1 GEMM and dx blocks: 16 accumulators (measured: 3x3 56x56x64 0.74 -> 0.90 of oneDNN)
  // Tiles for 64+ channels per group (4 vectors). Filter gradient: 6 input channels x 4 vectors of output
  // channels, 24 accumulators (measured: 1x1 7x7 2048->512 dw 4.45 -> 3.90 ms, 3x3 14x14 256->256 6.6-7.1 ->
  // 6.3 ms). Input gradient and forward: 7 pixels x 4 vectors, 28 accumulators (GCC keeps one of them on
  // the stack: 33 registers with the filter vectors and the broadcast); 4x4 before, whose 4 filter loads
  // per 16 fmas came from L2 faster than Intel's L2 delivers them at two 512-bit fmas a cycle. Input
  // gradient rows end in narrower blocks of at least kDxMin pixels. Forward passes whose 4-vector filter
  // block is past L2 (3x3x256) take 14 pixels x 2 vectors on rows of 14 and 28 (kFwdPastL2). The 1x1
  // GEMM takes 7x4 blocks too (kGemm) where its outputs are whole 4-vector blocks. FpropKernels::fprop,
  // fprop_gemm and DgradKernels::dgrad have the numbers.
  struct Wide {
    static constexpr int kFwd[2] = {7, 4}, kFwdPastL2[2] = {14, 2}, kDw[2] = {6, 4}, kDx[2] = {7, 4}, kDxMin = 4,
                         kGemm[2] = {7, 4};
  };
  static R zero() { return _mm512_setzero_ps(); }
  static R load(const T* p) { return _mm512_loadu_ps(p); }
  static R load(const Half16* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(T* p, R a) { _mm512_storeu_ps(p, a); }
  static void stream(T* p, R a) { _mm512_stream_ps(p, a); }  // p 64-byte aligned
  // L halves from src (64-byte aligned) to dst (32-byte aligned), non-temporal.
  static void stream16(std::uint16_t* dst, const std::uint16_t* src) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), _mm256_load_si256(reinterpret_cast<const __m256i*>(src)));
  }
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm512_set1_ps(s); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]].
  using P = __m512i;
  static P perm_index(const std::int32_t* idx) { return _mm512_loadu_si512(idx); }
  static R permute(R a, P idx) { return _mm512_permutexvar_ps(idx, a); }
  // Lane masks: lanes [lo, hi) set; select(m, a, b) takes a where set, else b (exact copies).
  using M = __mmask16;
  static M lanes(int lo, int hi) { return M(((1u << hi) - 1u) & ~((1u << lo) - 1u)); }
  static R select(M m, R a, R b) { return _mm512_mask_blend_ps(m, b, a); }
  static R canon(R a) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000))); }
  // Rounds 16 lanes to binary16 (nearest even, F16C) with canonical NaNs.
  static void store_half(std::uint16_t* dst, R a) {
    const __mmask16 nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    const __m256i h = _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_mask_blend_epi16(nan, h, _mm256_set1_epi16(0x7E00)));
  }
  // Rounds 16 lanes to bfloat16 (nearest even on the bits) with canonical NaNs.
  static void store_bf16(std::uint16_t* dst, R a) {
    const __m512i u = _mm512_castps_si512(a);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(r));
  }
};

struct VD {
  using T = double;
  using R = __m512d;
  static constexpr int L = 8, kPW = 6, kNV = 2, kTI = 6, kPF = kPW, kPG = kPW, kPD = kPW;
  static constexpr bool kSubRuns = true;  // dw tiles in sub-runs past L2 (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = true;  // depthwise column sweeps (KernelBase::dw_sweeps)
  static R zero() { return _mm512_setzero_pd(); }
  static R load(const T* p) { return _mm512_loadu_pd(p); }
  static void store(T* p, R a) { _mm512_storeu_pd(p, a); }
  static void stream(T* p, R a) { _mm512_stream_pd(p, a); }
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm512_set1_pd(s); }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]].
  using P = __m512i;
  static P perm_index(const std::int32_t* idx) {
    return _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)));
  }
  static R permute(R a, P idx) { return _mm512_permutexvar_pd(idx, a); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_pd(a, b, c); }
  static R add(R a, R b) { return _mm512_add_pd(a, b); }
  using M = __mmask8;
  static M lanes(int lo, int hi) { return M(((1u << hi) - 1u) & ~((1u << lo) - 1u)); }
  static R select(M m, R a, R b) { return _mm512_mask_blend_pd(m, b, a); }
  static R canon(R a) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a, _mm512_castsi512_pd(_mm512_set1_epi64(0x7FF8000000000000LL))); }
};

// Exact binary16 arithmetic in float lanes (see simd_avx2.h / numerics.h).
struct VH {
  using T = float;
  using R = __m512;
  // Dense blocks of 16 accumulators: the emulated fma's chain (2 fmas, 2 conversions) is long (measured:
  // 3x3 28x28x128 forward 30.9 -> 23.1 ms with 8-pixel blocks instead of 4, filter gradient 32.8 -> 25.5 ms).
  static constexpr int L = 16, kPW = 4, kNV = 2, kTI = 8, kPF = 8, kPG = 8, kPD = 8;
  static constexpr bool kSubRuns = true;  // dw tiles in sub-runs past L2 (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = true;  // depthwise column sweeps (KernelBase::dw_sweeps)
  static R zero() { return _mm512_setzero_ps(); }
  static R load(const T* p) { return _mm512_loadu_ps(p); }
  static R load(const Half16* p) { return VF::load(p); }
  static void store(T* p, R a) { _mm512_storeu_ps(p, a); }
  static void stream(T* p, R a) { _mm512_stream_ps(p, a); }  // p 64-byte aligned
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm512_set1_ps(s); }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]].
  using P = __m512i;
  static P perm_index(const std::int32_t* idx) { return _mm512_loadu_si512(idx); }
  static R permute(R a, P idx) { return _mm512_permutexvar_ps(idx, a); }
  static R half_round(R a) { return _mm512_cvtph_ps(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
  // binary16 fma(a, b, c) and add(a, b) (docs/numerics.md, "float16 accumulation on AVX-512"): the exact
  // result rounded to odd at binary32 precision, then once to binary16. Round-to-odd from the two directed
  // roundings: when the result is inexact they are adjacent and round-to-odd is the one whose last bit is
  // set; when it is exact they are equal, except an exact zero (up +0, dn -0), where it is up. So: dn if
  // its last bit is set, else up. No per-lane branch.
  static R odd(R up, R dn) {
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(_mm512_castps_si512(dn), _mm512_set1_epi32(1)), up, dn);
  }
  static R fma(R a, R b, R c) {
    return half_round(odd(_mm512_fmadd_round_ps(a, b, c, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC),
                          _mm512_fmadd_round_ps(a, b, c, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)));
  }
  static R add(R a, R b) {
    return half_round(odd(_mm512_add_round_ps(a, b, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC),
                          _mm512_add_round_ps(a, b, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)));
  }
  static R canon(R a) { return VF::canon(a); }
  using M = VF::M;
  static M lanes(int lo, int hi) { return VF::lanes(lo, hi); }
  static R select(M m, R a, R b) { return VF::select(m, a, b); }
  static void store_half(std::uint16_t* dst, R a) { VF::store_half(dst, a); }
  static void store_bf16(std::uint16_t* dst, R a) { VF::store_bf16(dst, a); }
  static void stream16(std::uint16_t* dst, const std::uint16_t* src) { VF::stream16(dst, src); }
};
