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
// Where the accumulators are binary32 and offsets 32-bit, C6 stages 16
// reduction indices per step (kWideBK) for both computations: half the steps,
// so half the per-step cursor work and barriers. The input gradient gained
// first (its per-step work, the tap cursor and the rows' liveness, is the
// larger: H100, batch 32, 3x3 128 @28 dx 0.263 -> 0.224 ms in C6, 1x1
// 1024-256 @14 0.158 -> 0.107). The forward pass lost with 16 at four blocks
// per SM (3x3 128 @28 0.226 -> 0.288): its 128 threads' staging registers
// spilled past the 128 registers four blocks allow (Nsight Compute). At three
// blocks per SM (170 registers) it gains instead (H200, batch 32, against
// four blocks with 8: 3x3 128 @28 fwd 0.226 -> 0.193 ms, 3x3/2 128 @56 0.228
// -> 0.197, 3x3 256 @14 0.343 -> 0.289, 1x1 1024-256 @14 0.156 -> 0.131;
// three blocks with 8 sat between: docs/performance.md). The input gradient
// keeps four blocks (three were slower: 0.224 -> 0.233). Float64's stages would
// pass 48 KiB of shared memory with 16; packed binary16 (32 accumulator
// registers, no spill) was not timed with 16 and keeps 8 at four blocks. The
// 64-bit index kernels keep 8: with 16, ptxas spills 50-80 local accesses into
// their step loops, and none of them was timed. (BK and the blocks per SM move
// no bit, and the configuration's choice does not depend on BK.)
template <class Num, bool kDgrad, class I = int>
struct ConvTiles {
  static constexpr bool kF32 = std::is_same<typename Num::S, float>::value;
  static constexpr int kWideBK = kF32 && std::is_same<I, int>::value ? 16 : 8;
  using C0 = typename std::conditional<kDgrad, TileCfg<128, 128, 4, 16, 2, kWideBK>, TileCfg<128, 128, 8, 8, 2>>::type;
  using C1 = typename std::conditional<kDgrad, TileCfg<128, 64, 4, 8, 2>, TileCfg<128, 64, 8, 4, 2>>::type;
  using C2 = TileCfg<64, 64, 4, 4, 2>;
  using C3 = TileCfg<128, 32, 4, 4, 2>;
  using C4 = TileCfg<64, 32, 4, 4, 4>;
  using C5 = TileCfg<32, 32, 4, 4, 8>;
  using C6 = typename std::conditional<kDgrad, TileCfg<64, 128, 4, 16, 4, kWideBK>,
                                       TileCfg<64, 128, 8, 8, kF32 ? 3 : 4, kWideBK>>::type;
};
constexpr int kConvGemmConfigs = kConvConfigs - 1;  // C0..C6; the direct kernel is the last configuration

// Per-SM efficiency of C0..C6 relative to C0 (pick_config), measured on an
// H100 (benchmarks/gpu_tiles.py --fit): [native binary16 accumulation][input
// gradient]. The binary32 input gradient's C6 value (C6 with 16-index steps)
// is the one that put the model's choice nearest the fastest configuration
// (1.006 of it, geometric mean over 22 cells); the median of its per-SM rates
// (1.13, the others' falling to 0.47-0.71 against the faster C0) chose worse.
// The binary32 forward pass's C6 value (three blocks per SM, 16-index steps)
// was chosen the same way on an H200 (the sixth lease): 1.05 is the lowest at
// which the model picks the fastest configuration on all 24 float32 forward
// cells of that sweep (its median, 0.95, picks 1.005 of the fastest). The
// other values are medians: C0..C5 from the first lease's sweep, the packed
// C6 values from the fifth's.
constexpr double kConvEff[2][2][kConvGemmConfigs] = {
    {{1.0, 0.59, 0.45, 0.39, 0.46, 0.47, 1.05},    // forward, float32 accumulators (and the other numerics)
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
