// The register-tiled fold shared by the GEMM-shaped kernels (forward, input
// gradient, filter gradient): tile shapes, vector memory helpers, and the
// micro-kernel that advances one thread's TM x TN accumulators.
//
// A block of NT threads owns a BM x BN tile of outputs; each step stages BK
// consecutive reduction indices of the A operand (As[k][m]) and of the B
// operand (Bs[k][n]) in shared memory, and every thread folds them into its
// accumulators in ascending k: acc[i][j] = fma(A[k][row i], B[k][col j],
// acc[i][j]). A thread's rows and columns are TM/4 (TN/4) runs of 4, so each
// k costs TM/4 + TN/4 vector shared loads for TM*TN fmas (8x8: 4 LDS.128 for
// 64 FFMA). Every accumulator is one output's fold; k steps are visited in
// the contract's order, and nothing splits or reorders them: tiling only
// decides which thread holds which output.
#pragma once
#include <cstring>
#include <type_traits>

#include "common.cuh"

namespace detconv {
namespace gpu {

template <int BM_, int BN_, int TM_, int TN_, int MINB_, int BK_ = 8>
struct TileCfg {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, MINB = MINB_;
  static constexpr int BK = BK_;                   // reduction indices per staged step
  static constexpr int TPM = BM / TM, TPN = BN / TN, NT = TPM * TPN;
  static constexpr int PAD = 4;                    // keeps 16-byte rows, spreads banks
  static constexpr int LDA = BM + PAD, LDB = BN + PAD;
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0, "4-wide sub-blocks");
  static_assert(BK % 4 == 0, "quads of reduction indices");
  // Row of the tile held by thread row-slot tm as its i-th row (runs of 4, TPM*4 apart).
  static __host__ __device__ __forceinline__ int row(int tm, int i) { return (i / 4) * (TPM * 4) + tm * 4 + (i % 4); }
  static __host__ __device__ __forceinline__ int col(int tn, int j) { return (j / 4) * (TPN * 4) + tn * 4 + (j % 4); }
};

// ------------------------------------------------------------ vector memory
// Four consecutive elements moved as one (or two) vector accesses: 8 bytes for
// 16-bit types, 16 for 32-bit, 2x16 for 64-bit. Callers guarantee alignment
// to 4 elements (the emulator checks it).
template <class E>
using QuadVec = typename std::conditional<sizeof(E) == 2, uint2, uint4>::type;

template <class E>
__device__ __forceinline__ void check_quad_alignment(const E* p) {
#if defined(DETCONV_CUDA_EMULATION)
  if (reinterpret_cast<std::uintptr_t>(p) % (sizeof(E) == 2 ? 8 : 16) != 0) {
    std::fprintf(stderr, "emu: misaligned vector access %p\n", static_cast<const void*>(p));
    std::abort();
  }
#else
  (void)p;
#endif
}

template <class E, class D>
__device__ __forceinline__ void load_quad(const E* p, D* out) {
  using V = QuadVec<E>;
  constexpr int kVecs = int(4 * sizeof(E) / sizeof(V));
  check_quad_alignment(p);
  const V* q = reinterpret_cast<const V*>(p);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const V t = q[v];
    std::memcpy(reinterpret_cast<char*>(out) + v * sizeof(V), &t, sizeof(V));
  }
}

template <class E>
__device__ __forceinline__ void store_quad(E* p, const E* in) {
  using V = QuadVec<E>;
  constexpr int kVecs = int(4 * sizeof(E) / sizeof(V));
  check_quad_alignment(p);
  V* q = reinterpret_cast<V*>(p);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    V t;
    std::memcpy(&t, reinterpret_cast<const char*>(in) + v * sizeof(V), sizeof(V));
    q[v] = t;
  }
}

inline bool aligned_quads(const void* p, int elem_bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % std::uintptr_t(elem_bytes == 2 ? 8 : 16) == 0;
}

// ------------------------------------------------------------ accumulators
// kc (1..BK, uniform over the block) staged steps in ascending k; a short last
// step takes a separate rolled loop, so the full step is one straight block.
template <bool kPred, class Cfg, class Acc, class S>
__device__ __forceinline__ void fold_steps(Acc& acc, const S* As, const S* Bs, int kc, int tm, int tn, unsigned live) {
  if (kc == Cfg::BK) {
#pragma unroll
    for (int k = 0; k < Cfg::BK; ++k) acc.template step<kPred>(As + k * Cfg::LDA, Bs + k * Cfg::LDB, tm, tn, live);
  } else {
#pragma unroll 1
    for (int k = 0; k < kc; ++k) acc.template step<kPred>(As + k * Cfg::LDA, Bs + k * Cfg::LDB, tm, tn, live);
  }
}

// One thread's TM x TN accumulators. fold() consumes kc staged k steps in
// ascending order; with kPred, row i is advanced only where bit i of `live`
// is set (the input gradient's taps that reach no output are skipped, never
// multiplied by zero).
template <class Num, class Cfg, bool kPacked = Num::kPacked>
struct Accum {
  using S = typename Num::S;
  // A skipped row is a predicated fma (fma_if) rather than a branch: binary32 only.
  static constexpr bool kPredFma = std::is_same<S, float>::value;
  S v[Cfg::TM][Cfg::TN];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::TN; ++j) v[i][j] = Num::zero();
  }
  __device__ __forceinline__ S get(int i, int j) const { return v[i][j]; }

  template <bool kPred>
  __device__ __forceinline__ void step(const S* as, const S* bs, int tm, int tn, unsigned live) {
    S a[Cfg::TM], b[Cfg::TN];
#pragma unroll
    for (int s = 0; s < Cfg::TM / 4; ++s) load_quad(as + s * (Cfg::TPM * 4) + tm * 4, a + 4 * s);
#pragma unroll
    for (int s = 0; s < Cfg::TN / 4; ++s) load_quad(bs + s * (Cfg::TPN * 4) + tn * 4, b + 4 * s);
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i) {
      const bool on = (live >> i) & 1u;
      if (kPred && !kPredFma && !on) continue;
#pragma unroll
      for (int j = 0; j < Cfg::TN; ++j) {
        if constexpr (kPred && kPredFma)
          fma_if(on, a[i], b[j], v[i][j]);
        else
          v[i][j] = Num::fma(a[i], b[j], v[i][j]);
      }
    }
  }

  template <bool kPred>
  __device__ __forceinline__ void fold(const S* As, const S* Bs, int kc, int tm, int tn, unsigned live) {
    fold_steps<kPred, Cfg>(*this, As, Bs, kc, tm, tn, live);
  }
};

// Native binary16 accumulation: two adjacent columns of a row share one
// __half2 register and advance with one HFMA2. The lanes are two different
// outputs; each lane is exactly the binary16 fma the contract names.
template <class Num, class Cfg>
struct Accum<Num, Cfg, true> {
  using S = typename Num::S;
  using S2 = typename Num::S2;
  static constexpr bool kPredFma = false;  // skipped rows branch (see fma_if)
  S2 v[Cfg::TM][Cfg::TN / 2];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::TN / 2; ++j) v[i][j] = Num::splat(Num::zero());
  }
  __device__ __forceinline__ S get(int i, int j) const {
    return (j & 1) ? __high2half(v[i][j >> 1]) : __low2half(v[i][j >> 1]);
  }

  template <bool kPred>
  __device__ __forceinline__ void step(const S* as, const S* bs, int tm, int tn, unsigned live) {
    S a[Cfg::TM];
    S2 b[Cfg::TN / 2];
#pragma unroll
    for (int s = 0; s < Cfg::TM / 4; ++s) load_quad(as + s * (Cfg::TPM * 4) + tm * 4, a + 4 * s);
#pragma unroll
    for (int s = 0; s < Cfg::TN / 4; ++s) load_quad(bs + s * (Cfg::TPN * 4) + tn * 4, b + 2 * s);
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i) {
      if (kPred && !((live >> i) & 1u)) continue;
      const S2 a2 = Num::splat(a[i]);
#pragma unroll
      for (int j = 0; j < Cfg::TN / 2; ++j) v[i][j] = Num::fma2(a2, b[j], v[i][j]);
    }
  }

  template <bool kPred>
  __device__ __forceinline__ void fold(const S* As, const S* Bs, int kc, int tm, int tn, unsigned live) {
    fold_steps<kPred, Cfg>(*this, As, Bs, kc, tm, tn, live);
  }
};

// Double-buffered shared stages of one block.
template <class S, class Cfg>
struct alignas(16) Stages {
  S a[2][Cfg::BK * Cfg::LDA];
  S b[2][Cfg::BK * Cfg::LDB];
};

// Blocks per SM for the launch bounds: 64-bit accumulators need the whole
// register file of one block.
template <class Num, class Cfg>
constexpr int min_blocks() {
  return sizeof(typename Num::S) == 8 ? 1 : Cfg::MINB;
}

// One GEMM tile configuration as the launchers' choice sees it.
struct TileChoice {
  i64 tiles;   // tiles (= blocks) the launch has
  int bm, bn;  // tile shape
  int per_sm;  // blocks resident per SM (the launch bounds' minimum)
  double eff;  // a whole SM's fma rate at that residency, relative to configuration 0
};

// The configuration with the least estimated time. A launch runs in waves of
// (SMs x per_sm) tiles; a wave lasts one tile's time, its area (every
// configuration folds the same reduction) over the rate of one of per_sm
// blocks sharing an SM. Large tiles are the most efficient per fma but leave
// SMs idle on small layers, and a last partial wave costs a whole one; the
// efficiencies come from timing every configuration on every ResNet-50 layer
// (benchmarks/gpu_tiles.py on an H100; docs/performance.md has the data).
inline int pick_config(const TileChoice* c, int count, int sms) {
  int best = 0;
  double best_t = 0;
  for (int i = 0; i < count; ++i) {
    const double waves = double(ceil_div(c[i].tiles, i64(sms) * c[i].per_sm));
    const double t = waves * c[i].bm * c[i].bn * c[i].per_sm / c[i].eff;
    if (i == 0 || t < best_t * (1 - 1e-9)) { best_t = t; best = i; }
  }
  return best;
}

// Configuration Cfg as pick_config sees it; tiles(bm, bn): the launch's tile count.
template <class Num, class Cfg, class Tiles>
inline TileChoice tile_choice(const Tiles& tiles, double eff) {
  return TileChoice{tiles(Cfg::BM, Cfg::BN), Cfg::BM, Cfg::BN, min_blocks<Num, Cfg>(), eff};
}

}  // namespace gpu
}  // namespace detconv
