// AVX2 + FMA + F16C vectors. Included inside namespace detconv::cpu::avx2,
// under #pragma GCC target("avx2,fma,f16c").

struct VF {
  using T = float;
  using R = __m256;
  static constexpr int L = 8, kPW = 4, kNV = 2, kTI = 6, kPF = kPW, kPG = 6, kPD = kPW;  // 8 (1x1 GEMM: 12, dw tiles: 12) accumulators of 16 registers
  static constexpr bool kSubRuns = true;  // dw tiles in sub-runs past L2 (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = true;  // depthwise column sweeps (KernelBase::dw_sweeps)
  // Forward tile for groups of whole 32-channel blocks: 3 pixels x 4 vectors, 12 accumulators like the
  // 6x2 block but 7 loads per 12 fmas instead of 8 (the filter vectors as fma memory operands). The same
  // tile for the 3-D input gradient (C3D block, in one process: 101.6 -> 99.6 and 102.7 -> 100.2 ms
  // against 6x2 tail blocks; 2-D rows keep their tail blocks: DgradKernels::dgrad).
  struct Wide {
    static constexpr int kFwd[2] = {3, 4}, kFwdPastL2[2] = {0, 0}, kDw[2] = {0, 0}, kDx[2] = {3, 4}, kDxMin = 3, kGemm[2] = {0, 0};
  };
  static R zero() { return _mm256_setzero_ps(); }
  static R load(const T* p) { return _mm256_loadu_ps(p); }
  static R load(const Half16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(T* p, R a) { _mm256_storeu_ps(p, a); }
  static void stream(T* p, R a) { _mm256_stream_ps(p, a); }  // p 32-byte aligned
  // L halves from src (64-byte aligned) to dst (16-byte aligned), non-temporal.
  static void stream16(std::uint16_t* dst, const std::uint16_t* src) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), _mm_load_si128(reinterpret_cast<const __m128i*>(src)));
  }
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm256_set1_ps(s); }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]].
  using P = __m256i;
  static P perm_index(const std::int32_t* idx) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)); }
  static R permute(R a, P idx) { return _mm256_permutevar8x32_ps(a, idx); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R canon(R a) { return _mm256_blendv_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
  // Lane masks: lanes [lo, hi) set; select(m, a, b) takes a where set, else b (exact copies).
  using M = __m256;
  static M lanes(int lo, int hi) {
    const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(k, _mm256_set1_epi32(lo - 1)),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), k)));
  }
  static R select(M m, R a, R b) { return _mm256_blendv_ps(b, a, m); }
  // Rounds 8 lanes to binary16 (nearest even, F16C) with canonical NaNs.
  static void store_half(std::uint16_t* dst, R a) {
    const __m256 nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    __m128i h = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i m = _mm256_castps_si256(nan);
    const __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extractf128_si256(m, 1));
    h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7E00), m16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
  }
  // Rounds 8 lanes to bfloat16 (nearest even on the bits) with canonical NaNs.
  static void store_bf16(std::uint16_t* dst, R a) {
    const __m256i u = _mm256_castps_si256(a);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);  // lanes 0-3, 4-7 low
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
  }
};

struct VD {
  using T = double;
  using R = __m256d;
  static constexpr int L = 4, kPW = 4, kNV = 2, kTI = 4, kPF = kPW, kPG = kPW, kPD = kPW;
  static constexpr bool kSubRuns = true;  // dw tiles in sub-runs past L2 (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = true;  // depthwise column sweeps (KernelBase::dw_sweeps)
  static R zero() { return _mm256_setzero_pd(); }
  static R load(const T* p) { return _mm256_loadu_pd(p); }
  static void store(T* p, R a) { _mm256_storeu_pd(p, a); }
  static void stream(T* p, R a) { _mm256_stream_pd(p, a); }
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm256_set1_pd(s); }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]], as
  // the pairs of 32-bit halves (2 idx[l], 2 idx[l] + 1).
  using P = __m256i;
  static P perm_index(const std::int32_t* idx) {
    const __m256i i = _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(idx)));
    const __m256i lo = _mm256_slli_epi64(i, 1);  // 2 idx[l] in each 64-bit lane's low half
    return _mm256_or_si256(lo, _mm256_slli_epi64(_mm256_add_epi64(lo, _mm256_set1_epi64x(1)), 32));
  }
  static R permute(R a, P idx) { return _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(a), idx)); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
  static R add(R a, R b) { return _mm256_add_pd(a, b); }
  using M = __m256d;
  static M lanes(int lo, int hi) {
    const __m256i k = _mm256_setr_epi64x(0, 1, 2, 3);
    return _mm256_castsi256_pd(_mm256_and_si256(_mm256_cmpgt_epi64(k, _mm256_set1_epi64x(lo - 1)),
                                                _mm256_cmpgt_epi64(_mm256_set1_epi64x(hi), k)));
  }
  static R select(M m, R a, R b) { return _mm256_blendv_pd(b, a, m); }
  static R canon(R a) { return _mm256_blendv_pd(a, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FF8000000000000LL)), _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
};

// Exact binary16 arithmetic in float lanes. The kernels run these lanes with
// MXCSR rounding down (kMxcsrRounding; KernelBase::FpEnv sets it per shard),
// so one fmadd gives the exact a*b + c rounded down and the negated fnmsub
// (-(a*b) - c, rounded down) the same rounded up: the AVX-512 VH's two
// directed roundings, with MXCSR in place of embedded rounding. Of the two,
// the one with its last bit set is the round-to-odd binary32 value, which
// F16C rounds once more to binary16 (its explicit round-to-nearest ignores
// MXCSR). docs/numerics.md, "float16 accumulation on AVX2".
struct VH {
  using T = float;
  using R = __m256;
  static constexpr unsigned kMxcsrRounding = 0x2000;  // RC = 01: toward -inf
  static constexpr int L = 8, kPW = 4, kNV = 2, kTI = 4, kPF = kPW, kPG = kPW, kPD = kPW;  // many chains: the emulated fma is latency-bound
  static constexpr bool kSubRuns = true;  // dw tiles in sub-runs past L2 (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = true;  // depthwise column sweeps (KernelBase::dw_sweeps)
  static R zero() { return _mm256_setzero_ps(); }
  static R load(const T* p) { return _mm256_loadu_ps(p); }
  static R load(const Half16* p) { return VF::load(p); }
  static void store(T* p, R a) { _mm256_storeu_ps(p, a); }
  static void stream(T* p, R a) { _mm256_stream_ps(p, a); }  // p 32-byte aligned
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm256_set1_ps(s); }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]].
  using P = __m256i;
  static P perm_index(const std::int32_t* idx) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)); }
  static R permute(R a, P idx) { return _mm256_permutevar8x32_ps(a, idx); }
  static R half_round(R a) { return _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
  static R neg(R a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  // Round to odd from the rounding up and down of one exact value: they are adjacent when it is inexact
  // and the odd one is wanted; equal when it is exact, except an exact zero (up +0, dn -0), where it is up.
  // So: dn where its last bit is set, else up (blendv reads the bit shifted into the sign).
  static R odd(R up, R dn) {
    return _mm256_blendv_ps(up, dn, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(dn), 31)));
  }
  static R fma(R a, R b, R c) { return half_round(odd(neg(_mm256_fnmsub_ps(a, b, c)), _mm256_fmadd_ps(a, b, c))); }
  static R add(R a, R b) { return half_round(odd(neg(_mm256_sub_ps(neg(a), b)), _mm256_add_ps(a, b))); }
  static R canon(R a) { return VF::canon(a); }
  using M = VF::M;
  static M lanes(int lo, int hi) { return VF::lanes(lo, hi); }
  static R select(M m, R a, R b) { return VF::select(m, a, b); }
  static void store_half(std::uint16_t* dst, R a) { VF::store_half(dst, a); }
  static void store_bf16(std::uint16_t* dst, R a) { VF::store_bf16(dst, a); }
  static void stream16(std::uint16_t* dst, const std::uint16_t* src) { VF::stream16(dst, src); }
};
