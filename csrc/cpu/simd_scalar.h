// Portable "vectors": fixed-size arrays folded lane by lane with std::fma.
// Included inside namespace detconv::cpu::scalar.
#include <cmath>

template <class T_, int L_>
struct Lanes { T_ v[L_]; };

template <class T_, int L_, int PW_, int NV_>
struct ScalarVecBase {
  using T = T_;
  using R = Lanes<T_, L_>;
  static constexpr int L = L_, kPW = PW_, kNV = NV_, kTI = PW_, kPF = PW_, kPG = PW_, kPD = PW_;
  static constexpr bool kSubRuns = false;  // whole-chunk dw tiles (WgradKernels::sub_runs)
  static constexpr bool kDwSweeps = false;  // per-tap depthwise blocks only (KernelBase::dw_sweeps)
  static R zero() { R r; for (int l = 0; l < L; ++l) r.v[l] = T(0); return r; }
  static R load(const T* p) { R r; std::memcpy(r.v, p, sizeof(r.v)); return r; }
  static R load(const Half16* p) { R r; for (int l = 0; l < L; ++l) r.v[l] = T(half_to_float(p[l].bits)); return r; }
  static void store(T* p, const R& a) { std::memcpy(p, a.v, sizeof(a.v)); }
  static void stream(T* p, const R& a) { store(p, a); }
  static void stream16(std::uint16_t* dst, const std::uint16_t* src) { std::memcpy(dst, src, sizeof(std::uint16_t) * L); }
  static void fence() {}
  static R bcast(T s) { R r; for (int l = 0; l < L; ++l) r.v[l] = s; return r; }
  static void store_half(std::uint16_t* dst, const R& a) { for (int l = 0; l < L; ++l) dst[l] = float_to_half(float(a.v[l])); }
  static void store_bf16(std::uint16_t* dst, const R& a) { for (int l = 0; l < L; ++l) dst[l] = float_to_bf16(float(a.v[l])); }
  // Lane masks: lanes [lo, hi) set; select(m, a, b) takes a where set, else b.
  struct M { int lo, hi; };
  static M lanes(int lo, int hi) { return M{lo, hi}; }
  static R select(M m, const R& a, const R& b) { R r; for (int l = 0; l < L; ++l) r.v[l] = l >= m.lo && l < m.hi ? a.v[l] : b.v[l]; return r; }
  static R canon(const R& a) { R r; for (int l = 0; l < L; ++l) r.v[l] = a.v[l] != a.v[l] ? canonical_nan<T_>() : a.v[l]; return r; }
  // Lane permutes (grouped convolutions, lanes across groups): permute(a, idx) lane l = a[idx[l]].
  struct P { int v[L_]; };
  static P perm_index(const std::int32_t* idx) { P r; for (int l = 0; l < L; ++l) r.v[l] = idx[l]; return r; }
  static R permute(const R& a, const P& idx) { R r; for (int l = 0; l < L; ++l) r.v[l] = a.v[idx.v[l]]; return r; }
};

struct VF : ScalarVecBase<float, 8, 4, 1> {
  static R fma(const R& a, const R& b, const R& c) { R r; for (int l = 0; l < L; ++l) r.v[l] = std::fma(a.v[l], b.v[l], c.v[l]); return r; }
  static R add(const R& a, const R& b) { R r; for (int l = 0; l < L; ++l) r.v[l] = a.v[l] + b.v[l]; return r; }
};
struct VD : ScalarVecBase<double, 4, 4, 1> {
  static R fma(const R& a, const R& b, const R& c) { R r; for (int l = 0; l < L; ++l) r.v[l] = std::fma(a.v[l], b.v[l], c.v[l]); return r; }
  static R add(const R& a, const R& b) { R r; for (int l = 0; l < L; ++l) r.v[l] = a.v[l] + b.v[l]; return r; }
};
// Native binary16 accumulation: exact binary16 fma/add (numerics.h).
struct VH : ScalarVecBase<float, 8, 2, 1> {
  static R fma(const R& a, const R& b, const R& c) { R r; for (int l = 0; l < L; ++l) r.v[l] = fma_h16(a.v[l], b.v[l], c.v[l]); return r; }
  static R add(const R& a, const R& b) { R r; for (int l = 0; l < L; ++l) r.v[l] = add_h16(a.v[l], b.v[l]); return r; }
};
