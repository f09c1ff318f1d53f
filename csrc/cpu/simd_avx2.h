// AVX2 + FMA + F16C vectors. Included inside namespace detconv::cpu::avx2,
// under #pragma GCC target("avx2,fma,f16c").

struct VF {
  using T = float;
  using R = __m256;
  static constexpr int L = 8, kPW = 4, kNV = 2, kTI = 6, kPF = kPW, kPG = 6, kPD = kPW;  // 8 (1x1 GEMM: 12, dw tiles: 12) accumulators of 16 registers
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
  static R zero() { return _mm256_setzero_pd(); }
  static R load(const T* p) { return _mm256_loadu_pd(p); }
  static void store(T* p, R a) { _mm256_storeu_pd(p, a); }
  static void stream(T* p, R a) { _mm256_stream_pd(p, a); }
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm256_set1_pd(s); }
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

// Exact binary16 arithmetic in float lanes: TwoSum, round to odd at 24 bits,
// then round to nearest binary16 with F16C (see numerics.h for why).
struct VH {
  using T = float;
  using R = __m256;
  static constexpr int L = 8, kPW = 4, kNV = 2, kTI = 4, kPF = kPW, kPG = kPW, kPD = kPW;  // many chains: the emulated fma is latency-bound
  static R zero() { return _mm256_setzero_ps(); }
  static R load(const T* p) { return _mm256_loadu_ps(p); }
  static R load(const Half16* p) { return VF::load(p); }
  static void store(T* p, R a) { _mm256_storeu_ps(p, a); }
  static void stream(T* p, R a) { _mm256_stream_ps(p, a); }  // p 32-byte aligned
  static void fence() { _mm_sfence(); }
  static R bcast(T s) { return _mm256_set1_ps(s); }
  static R ro_sum(R x, R y) {
    const R t = _mm256_add_ps(x, y);
    const R bb = _mm256_sub_ps(t, x);
    const R e = _mm256_add_ps(_mm256_sub_ps(x, _mm256_sub_ps(t, bb)), _mm256_sub_ps(y, bb));
    const __m256i tu = _mm256_castps_si256(t);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i even = _mm256_cmpeq_epi32(_mm256_and_si256(tu, one), _mm256_setzero_si256());
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    const __m256i finite = _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(tu, expo), expo), _mm256_set1_epi32(-1));
    const __m256i inexact = _mm256_castps_si256(_mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_NEQ_OQ));
    const __m256i adjust = _mm256_and_si256(_mm256_and_si256(even, finite), inexact);
    // e and t of the same sign: the odd neighbour is further from zero (+1), else nearer (-1).
    const __m256i same = _mm256_srai_epi32(_mm256_xor_si256(tu, _mm256_castps_si256(e)), 31);  // -1 if signs differ
    const __m256i step = _mm256_or_si256(_mm256_andnot_si256(same, one), same);                   // +1 or -1
    return _mm256_castsi256_ps(_mm256_add_epi32(tu, _mm256_and_si256(adjust, step)));
  }
  static R half_round(R a) { return _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
  // binary16 fma: the binary32 fma's result rounded to binary16, except in lanes where that could round twice
  // wrongly (a binary16 midpoint, or 0 < |s| < 2^-14): those take the exact path. See the AVX-512 VH and
  // docs/numerics.md ("float16 accumulation, fast").
  static R hazard(R s) {
    const __m256i u = _mm256_castps_si256(s);
    const __m256i mid = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x1FFF)), _mm256_set1_epi32(0x1000));
    // 0 < |s| < 2^-14 as a signed compare: |s| bits - 1 in [0, 0x387FFFFF) (zero wraps to -1: excluded below)
    const __m256i mag1 = _mm256_sub_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(1));
    const __m256i tiny = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), mag1),
                                             _mm256_cmpgt_epi32(_mm256_set1_epi32(0x387FFFFF), mag1));
    return _mm256_castsi256_ps(_mm256_or_si256(mid, tiny));
  }
  // Out of line: the rare exact path must not cost the hot loop registers.
  __attribute__((noinline, cold)) static R fma_hazard(R a, R b, R c, R s, R h) {
    return _mm256_blendv_ps(half_round(s), half_round(ro_sum(_mm256_mul_ps(a, b), c)), h);
  }
  static R fma(R a, R b, R c) {
    const R s = _mm256_fmadd_ps(a, b, c);
    const R h = hazard(s);
    if (__builtin_expect(_mm256_testz_ps(h, h), 1)) return half_round(s);
    return fma_hazard(a, b, c, s, h);
  }
  static R add(R a, R b) { return half_round(ro_sum(a, b)); }
  static R canon(R a) { return VF::canon(a); }
  using M = VF::M;
  static M lanes(int lo, int hi) { return VF::lanes(lo, hi); }
  static R select(M m, R a, R b) { return VF::select(m, a, b); }
  static void store_half(std::uint16_t* dst, R a) { VF::store_half(dst, a); }
  static void store_bf16(std::uint16_t* dst, R a) { VF::store_bf16(dst, a); }
  static void stream16(std::uint16_t* dst, const std::uint16_t* src) { VF::stream16(dst, src); }
};
