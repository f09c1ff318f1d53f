// Forward / input-gradient launcher: picks the implicit-GEMM tile or the
// direct kernel by shape (or as DETCONV_CUDA_TILE forces). Configurations
// never change a bit; they only decide which thread holds which output.
#pragma once
#include "common.cuh"
#include "conv_direct.cuh"
#include "conv_igemm.cuh"

namespace detconv {
namespace gpu {

// Number of configurations launch_conv chooses from (igemm tiles, then direct).
constexpr int kConvConfigs = 8;

// Tile configurations, in order of preference. The input gradient's rows are
// predicated per tap, so its threads hold 4 rows (4 predicates, which stay in
// predicate registers) and more columns. C4 and C5 are blocks of 128 and 64
// threads for layers too small to give every SM a few large tiles (late
// layers, batch 1): no split of the reduction is allowed, so the only way to
// occupy the GPU there is more, smaller tiles. C6 is C0's thread tile (64 fmas
// per 4 shared vector loads) in half the block: four blocks to an SM instead of
// two, finer waves at C0's rate (H100, device time, batch 32: 3x3 128 @28 fwd
// 0.252 -> 0.224 ms, 3x3/2 128 @56 fwd 0.254 -> 0.226). 128x64 and 64x64 tiles
// of the same thread tile were timed too: they won three forward cells by 1-9%
// and lost the rest.
//
// The input gradient's C0 and C6 stage 16 reduction indices per step where the
// accumulators are binary32: half the steps, so half the per-step tap cursor,
// row liveness and barrier (batch 32: 3x3 128 @28 dx 0.263 -> 0.224 ms in C6,
// 1x1 1024-256 @14 0.158 -> 0.107). The forward pass ran slower with 16 (3x3
// 128 @28 0.226 -> 0.288 in C6: its 128 threads' staging registers spill, as
// C6's do a little even with 8; Nsight Compute, docs/performance.md), float64's
// stages would pass 48 KiB of shared memory, and packed binary16 was not timed
// with it. The 64-bit index kernels keep 8 too: with 16, ptxas spills 50-80
// local accesses into their step loops, and none of them was timed. (BK moves
// no bit, and the configuration's choice does not depend on it.)
template <class Num, bool kDgrad, class I = int>
struct ConvTiles {
  static constexpr int kDgradBK =
      std::is_same<typename Num::S, float>::value && std::is_same<I, int>::value ? 16 : 8;
  using C0 = typename std::conditional<kDgrad, TileCfg<128, 128, 4, 16, 2, kDgradBK>, TileCfg<128, 128, 8, 8, 2>>::type;
  using C1 = typename std::conditional<kDgrad, TileCfg<128, 64, 4, 8, 2>, TileCfg<128, 64, 8, 4, 2>>::type;
  using C2 = TileCfg<64, 64, 4, 4, 2>;
  using C3 = TileCfg<128, 32, 4, 4, 2>;
  using C4 = TileCfg<64, 32, 4, 4, 4>;
  using C5 = TileCfg<32, 32, 4, 4, 8>;
  using C6 = typename std::conditional<kDgrad, TileCfg<64, 128, 4, 16, 4, kDgradBK>, TileCfg<64, 128, 8, 8, 4>>::type;
};
constexpr int kConvGemmConfigs = kConvConfigs - 1;  // C0..C6; the direct kernel is the last configuration

// Per-SM efficiency of C0..C6 relative to C0 (pick_config), measured on an
// H100 (benchmarks/gpu_tiles.py --fit): [native binary16 accumulation][input
// gradient]. The binary32 input gradient's C6 value (C6 with 16-index steps)
// is the one that put the model's choice nearest the fastest configuration
// (1.006 of it, geometric mean over 22 cells); the median of its per-SM rates
// (1.13, the others' falling to 0.47-0.71 against the faster C0) chose worse.
// The other values are medians: C0..C5 from the first lease's sweep, C6 from
// the fifth's.
constexpr double kConvEff[2][2][kConvGemmConfigs] = {
    {{1.0, 0.59, 0.45, 0.39, 0.46, 0.47, 1.07},    // forward, float32 accumulators (and the other numerics)
     {1.0, 0.73, 0.58, 0.51, 0.59, 0.61, 1.10}},   // input gradient
    {{1.0, 0.78, 0.62, 0.51, 0.56, 0.57, 1.12},    // forward, packed binary16 accumulators
     {1.0, 0.87, 0.74, 0.64, 0.69, 0.68, 1.10}}};  // input gradient

template <class Num, bool kDgrad>
inline int choose_conv_config(const ConvProblem& p) {
  const int forced = forced_tile(kConvConfigs);
  if (forced >= 0) return forced;
  const i64 Jg = kDgrad ? p.Cg : p.Cog();
  // Narrow groups (depthwise): a GEMM tile would be mostly empty. An ungrouped
  // input gradient with few channels (a network's first layer) still gains from
  // a tile's reuse of each dy value across its rows (7x7/2 3->64 at batch 32 on
  // an H100: 3.9 ms in 32x32 tiles, 7.8 ms one thread per output).
  if (Jg < 8 && !(kDgrad && p.G == 1)) return kConvGemmConfigs;
  using T = ConvTiles<Num, kDgrad>;
  const double* eff = kConvEff[Num::kPacked ? 1 : 0][kDgrad ? 1 : 0];
  auto tiles = [&](int bm, int bn) { return make_igemm_geo<kDgrad>(p, bm, bn).n_tiles; };
  const TileChoice c[kConvGemmConfigs] = {
      tile_choice<Num, typename T::C0>(tiles, eff[0]), tile_choice<Num, typename T::C1>(tiles, eff[1]),
      tile_choice<Num, typename T::C2>(tiles, eff[2]), tile_choice<Num, typename T::C3>(tiles, eff[3]),
      tile_choice<Num, typename T::C4>(tiles, eff[4]), tile_choice<Num, typename T::C5>(tiles, eff[5]),
      tile_choice<Num, typename T::C6>(tiles, eff[6])};
  return pick_config(c, kConvGemmConfigs, sm_count());
}

template <class Num, bool kDgrad>
const char* launch_conv(const ConvProblem& p, const void* a_src, const void* filt, const void* bias, void* out,
                        cudaStream_t stream, const char* where) {
  const int cfg = choose_conv_config<Num, kDgrad>(p);
  return dispatch_index(p, [&](auto index) {
    using I = decltype(index);
    using Tiles = ConvTiles<Num, kDgrad, I>;
    switch (cfg) {
      case 0: return launch_igemm<Num, kDgrad, typename Tiles::C0, I>(p, a_src, filt, bias, out, stream, where);
      case 1: return launch_igemm<Num, kDgrad, typename Tiles::C1, I>(p, a_src, filt, bias, out, stream, where);
      case 2: return launch_igemm<Num, kDgrad, typename Tiles::C2, I>(p, a_src, filt, bias, out, stream, where);
      case 3: return launch_igemm<Num, kDgrad, typename Tiles::C3, I>(p, a_src, filt, bias, out, stream, where);
      case 4: return launch_igemm<Num, kDgrad, typename Tiles::C4, I>(p, a_src, filt, bias, out, stream, where);
      case 5: return launch_igemm<Num, kDgrad, typename Tiles::C5, I>(p, a_src, filt, bias, out, stream, where);
      case 6: return launch_igemm<Num, kDgrad, typename Tiles::C6, I>(p, a_src, filt, bias, out, stream, where);
      default: return launch_direct_conv<Num, kDgrad, I>(p, a_src, filt, bias, out, stream, where);
    }
  });
}

}  // namespace gpu
}  // namespace detconv
