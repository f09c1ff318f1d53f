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
constexpr int kConvConfigs = 5;

// Tile configurations, in order of preference. The input gradient's rows are
// predicated per tap, so its threads hold 4 rows (4 predicates, which stay in
// predicate registers) and more columns.
template <bool kDgrad>
struct ConvTiles {
  using C0 = typename std::conditional<kDgrad, TileCfg<128, 128, 4, 16, 2>, TileCfg<128, 128, 8, 8, 2>>::type;
  using C1 = typename std::conditional<kDgrad, TileCfg<128, 64, 4, 8, 2>, TileCfg<128, 64, 8, 4, 2>>::type;
  using C2 = TileCfg<64, 64, 4, 4, 2>;
  using C3 = TileCfg<128, 32, 4, 4, 2>;
};

template <bool kDgrad>
inline int choose_conv_config(const ConvProblem& p) {
  const int forced = forced_tile(kConvConfigs);
  if (forced >= 0) return forced;
  const i64 Jg = kDgrad ? p.Cg : p.Cog();
  if (Jg < 8) return 4;  // depthwise / narrow groups: a GEMM tile would be mostly empty
  using Tiles = ConvTiles<kDgrad>;
  const int BM[4] = {Tiles::C0::BM, Tiles::C1::BM, Tiles::C2::BM, Tiles::C3::BM};
  const int BN[4] = {Tiles::C0::BN, Tiles::C1::BN, Tiles::C2::BN, Tiles::C3::BN};
  double use[4];
  i64 blocks[4];
  for (int c = 0; c < 4; ++c) {
    const IgemmGeo g = make_igemm_geo<kDgrad>(p, BM[c], BN[c]);
    use[c] = tile_use(Jg, BN[c]);
    blocks[c] = g.n_tiles;
  }
  return pick_config(use, blocks, 4);
}

template <class Num, bool kDgrad>
const char* launch_conv(const ConvProblem& p, const void* a_src, const void* filt, const void* bias, void* out,
                        cudaStream_t stream, const char* where) {
  const int cfg = choose_conv_config<kDgrad>(p);
  return dispatch_index(p, [&](auto index) {
    using I = decltype(index);
    using Tiles = ConvTiles<kDgrad>;
    switch (cfg) {
      case 0: return launch_igemm<Num, kDgrad, typename Tiles::C0, I>(p, a_src, filt, bias, out, stream, where);
      case 1: return launch_igemm<Num, kDgrad, typename Tiles::C1, I>(p, a_src, filt, bias, out, stream, where);
      case 2: return launch_igemm<Num, kDgrad, typename Tiles::C2, I>(p, a_src, filt, bias, out, stream, where);
      case 3: return launch_igemm<Num, kDgrad, typename Tiles::C3, I>(p, a_src, filt, bias, out, stream, where);
      default: return launch_direct_conv<Num, kDgrad, I>(p, a_src, filt, bias, out, stream, where);
    }
  });
}

}  // namespace gpu
}  // namespace detconv
