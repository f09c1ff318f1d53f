// Filter gradient, pass 1: every contract chunk's parts into the workspace
// (ws[chunk * F + f], f the (D)HWIO offset), no atomics. Pass 2 is the
// in-order combine of reduce.cuh.
//
// GEMM form (wgrad_gemm_kernel): within one chunk, dw of group g is a GEMM
// whose rows are rho = tap * Cg + i (kd, kh, kw, i: one filter row of HWIO),
// columns the group's output channels, and K the chunk's r ascending:
//   A[r][rho] = the input value tap (kd, kh, kw) meets for output r, channel
//               g*Cg + i (+0 in padding, as the forward pass), B[r][o] = dy[r, o].
// Each accumulator is one part of wgrad_chunk_fold, folded in ascending r.
// Quads run along rows (4 consecutive input channels of one tap) and along
// columns (4 consecutive output channels), contiguous in NHWC, so both stage
// straight into shared memory without a transpose.
//
// Direct form (wgrad_direct_kernel): one thread per (chunk, f), for narrow
// groups (depthwise) where a GEMM tile would be mostly empty.
#pragma once
#include "common.cuh"
#include "gemm_core.cuh"

namespace detconv {
namespace gpu {

struct WgradGeo {
  i64 RT = 0, Jg = 0;  // rows (taps * Cg), columns (Cog) per group
  i64 n_ntiles = 0, n_mtiles = 0, n_tiles = 0;
};

// The output position of one reduction index r, stepped forward in place.
template <class I>
struct RPos {
  I n, od, oh, ow;
  __device__ __forceinline__ void set(const ConvProblem& p, I r) {
    const Coord4<I> c = decode4(r, I(p.OD), I(p.OH), I(p.OW));
    n = c.n; od = c.d; oh = c.h; ow = c.w;
  }
  __device__ __forceinline__ void step(const ConvProblem& p, I by) {
    ow += by;
    while (ow >= I(p.OW)) {
      ow -= I(p.OW);
      if (++oh == I(p.OH)) {
        oh = 0;
        if (++od == I(p.OD)) { od = 0; ++n; }
      }
    }
  }
};

// kVec: every operand quad is contiguous and aligned (one vector load each).
template <class Num, class Cfg, class I, bool kVec>
__global__ void __launch_bounds__(Cfg::NT, min_blocks<Num, Cfg>())
wgrad_gemm_kernel(const ConvProblem p, const WgradGeo geo, const Chunks chunks, const typename Num::T* __restrict__ x,
                  const typename Num::T* __restrict__ dy, typename Num::S* __restrict__ ws) {
  using S = typename Num::S;
  using T = typename Num::T;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, NT = Cfg::NT;
  constexpr int QA = BM * BK / 4, QB = BN * BK / 4;
  constexpr int UA = (QA + NT - 1) / NT, UB = (QB + NT - 1) / NT;
  __shared__ Stages<S, Cfg> sm;

  const int tid = threadIdx.x, tn = tid % Cfg::TPN, tm = tid / Cfg::TPN;
  const StridesI<I> xs(p.x_strides()), ys(p.y_strides());
  const I F = I(p.filter_elems());
  const I Cog = I(p.Co) / I(p.G), RT = I(geo.RT), Jg = I(geo.Jg), D = I(p.D), H = I(p.H), W = I(p.W);

  for (I tile = I(blockIdx.x); tile < I(geo.n_tiles); tile += I(gridDim.x)) {
    I rest = tile, nt, mt, g, chunk;
    divmod(rest, I(geo.n_ntiles), rest, nt);
    divmod(rest, I(geo.n_mtiles), rest, mt);
    divmod(rest, I(p.G), chunk, g);
    const I m0 = mt * BM, n0 = nt * BN;
    const I r_begin = I(chunks.begin(chunk)), r_end = I(chunks.end(chunk));

    // ---- loader state. A quad u: rows m0+am+0..3 at step row ar (its output
    // position apos, stepped with r); B quad: columns n0+bn+0..3 at step row br,
    // whose dy offset is n*ys.n + s*ys.w for r = n*S + s (both layouts).
    RPos<I> apos[UA];
    // When the A and B quads of a thread sit on the same step row (square
    // tiles), B reuses the A position instead of tracking its own.
    constexpr bool kSharedPos = BM == BN && UA == UB;
    I b_n[kSharedPos ? 1 : UB], b_s[kSharedPos ? 1 : UB];
    I a_dk[UA], a_hk[UA], a_wk[UA];  // row am's tap offsets (kd*dd - pf, ...): the vector path
    I a_ch[UA];                      // row am's channel offset
    const I S_sp = I(p.OD) * I(p.OH) * I(p.OW);
    // Tap offsets and channel offset of filter row rho (tap * Cg + i).
    auto row_taps = [&](I rho, I& dk, I& hk, I& wk, I& ch) {
      I t, i, kd, kh, kw;
      divmod(rho, I(p.Cg), t, i);
      divmod(t, I(p.KW), t, kw);
      divmod(t, I(p.KH), kd, kh);
      dk = kd * I(p.dd) - I(p.pf);
      hk = kh * I(p.dh) - I(p.pt);
      wk = kw * I(p.dw) - I(p.pl);
      ch = (g * I(p.Cg) + i) * xs.c;
    };
#pragma unroll
    for (int u = 0; u < UA; ++u) {
      const int q = tid + u * NT;
      const int ar = q / (BM / 4), am = (q % (BM / 4)) * 4;
      apos[u].set(p, r_begin + ar < r_end ? r_begin + I(ar) : r_begin);
      const I rho = m0 + am;
      row_taps(rho < RT ? rho : I(0), a_dk[u], a_hk[u], a_wk[u], a_ch[u]);
    }
#pragma unroll
    for (int u = 0; u < (kSharedPos ? 0 : UB); ++u) {
      const int q = tid + u * NT, br = q / (BN / 4);
      divmod(r_begin + br < r_end ? r_begin + I(br) : r_begin, S_sp, b_n[u], b_s[u]);
    }
    T ra[UA][4], rb[UB][4];

    auto load = [&](I r0) {
#pragma unroll
      for (int u = 0; u < UA; ++u) {
        const int q = tid + u * NT;
        const int ar = q / (BM / 4), am = (q % (BM / 4)) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) ra[u][j] = T(0);
        const I rho = m0 + am;
        if (q >= QA || r0 + ar >= r_end || rho >= RT) continue;
        const RPos<I>& s = apos[u];
        const I dbase = s.od * I(p.sd), hbase = s.oh * I(p.sh), wbase = s.ow * I(p.sw);
        const I nbase = s.n * xs.n;
        if (kVec) {  // Cg % 4 == 0, NHWC: the 4 rows are one tap's consecutive channels
          const I id = dbase + a_dk[u], ih = hbase + a_hk[u], iw = wbase + a_wk[u];
          if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
            load_quad(x + (nbase + id * xs.d + ih * xs.h + iw * xs.w + a_ch[u]), ra[u]);
        } else {  // rows of different taps, or strided channels: decode each row
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (rho + j >= RT) break;
            I dk, hk, wk;
            I ch;
            row_taps(rho + j, dk, hk, wk, ch);
            const I id = dbase + dk, ih = hbase + hk, iw = wbase + wk;
            if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
              ra[u][j] = x[nbase + id * xs.d + ih * xs.h + iw * xs.w + ch];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int q = tid + u * NT;
        const int br = q / (BN / 4), bn = (q % (BN / 4)) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) rb[u][j] = T(0);
        const I o = n0 + bn;
        if (q >= QB || r0 + br >= r_end || o >= Jg) continue;
        const I rowoff = kSharedPos ? ys.at(apos[u].n, apos[u].od, apos[u].oh, apos[u].ow, 0)
                                    : b_n[u] * ys.n + b_s[u] * ys.w;
        const T* src = dy + (rowoff + (g * Cog + o) * ys.c);
        if (kVec) {
          load_quad(src, rb[u]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (o + j < Jg) rb[u][j] = src[j * ys.c];
        }
      }
    };
    auto stage = [&](int buf) {
#pragma unroll
      for (int u = 0; u < UA; ++u) {
        const int q = tid + u * NT;
        if (q >= QA) continue;
        S v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = Num::load(ra[u][j]);
        store_quad(sm.a[buf] + (q / (BM / 4)) * Cfg::LDA + (q % (BM / 4)) * 4, v);
      }
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int q = tid + u * NT;
        if (q >= QB) continue;
        S v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = Num::load(rb[u][j]);
        store_quad(sm.b[buf] + (q / (BN / 4)) * Cfg::LDB + (q % (BN / 4)) * 4, v);
      }
    };
    auto advance = [&]() {
#pragma unroll
      for (int u = 0; u < UA; ++u) apos[u].step(p, BK);
#pragma unroll
      for (int u = 0; u < (kSharedPos ? 0 : UB); ++u) {
        b_s[u] += BK;
        while (b_s[u] >= S_sp) { b_s[u] -= S_sp; ++b_n[u]; }
      }
    };

    Accum<Num, Cfg> acc;
    acc.zero();
    __syncthreads();  // the previous tile is done with shared memory
    I r0 = r_begin;
    if (r0 < r_end) {
      load(r0);
      stage(0);
    }
    __syncthreads();
    int buf = 0;
    while (r0 < r_end) {
      const I r1 = r0 + BK;
      const bool more = r1 < r_end;
      if (more) {
        advance();
        load(r1);
      }
      acc.template fold<false>(sm.a[buf], sm.b[buf], int(min64(BK, r_end - r0)), tm, tn, ~0u);
      if (!more) break;
      stage(buf ^ 1);
      __syncthreads();
      buf ^= 1;
      r0 = r1;
    }

    // ---- parts to the workspace: ws[chunk*F + rho*Co + o] (rho*Co + o is the (D)HWIO offset)
    S* wp = ws + chunk * F;
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i) {
      const I rho = m0 + Cfg::row(tm, i);
      if (rho >= RT) continue;
#pragma unroll
      for (int j = 0; j < Cfg::TN; ++j) {
        const I o = n0 + Cfg::col(tn, j);
        if (o < Jg) wp[rho * I(p.Co) + g * Cog + o] = acc.get(i, j);
      }
    }
  }
}

// One thread per (chunk, f); f = rho * Co + o fastest, so dy reads coalesce.
template <class Num, class I>
__global__ void __launch_bounds__(256)
wgrad_direct_kernel(const ConvProblem p, const Chunks chunks, const typename Num::T* __restrict__ x,
                    const typename Num::T* __restrict__ dy, typename Num::S* __restrict__ ws) {
  using S = typename Num::S;
  const StridesI<I> xs(p.x_strides()), ys(p.y_strides());
  const I F = I(p.filter_elems()), total = I(chunks.P) * F, Cog = I(p.Co) / I(p.G);
  const I D = I(p.D), H = I(p.H), W = I(p.W);
  for (I e = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); e < total; e += I(gridDim.x) * I(blockDim.x)) {
    I chunk, f, rho, o, t, i, kd, kh, kw;
    divmod(e, F, chunk, f);
    divmod(f, I(p.Co), rho, o);
    divmod(rho, I(p.Cg), t, i);
    divmod(t, I(p.KW), t, kw);
    divmod(t, I(p.KH), kd, kh);
    const I c = (o / Cog) * I(p.Cg) + i;
    const I r_begin = I(chunks.begin(chunk)), r_end = I(chunks.end(chunk));
    const I dk = kd * I(p.dd) - I(p.pf), hk = kh * I(p.dh) - I(p.pt), wk = kw * I(p.dw) - I(p.pl);
    S part = Num::zero();
    RPos<I> s;
    s.set(p, r_begin);
    for (I r = r_begin; r < r_end; ++r, s.step(p, 1)) {  // wgrad_chunk_fold: r ascending
      const I id = s.od * I(p.sd) + dk, ih = s.oh * I(p.sh) + hk, iw = s.ow * I(p.sw) + wk;
      const bool inside = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
      const S v = inside ? Num::load(x[xs.at(s.n, id, ih, iw, c)]) : Num::zero();
      part = Num::fma(v, Num::load(dy[ys.at(s.n, s.od, s.oh, s.ow, o)]), part);
    }
    ws[e] = part;
  }
}

// GEMM tiles 128x128, 128x64, 64x64, 128x32, 64x32, 32x32, then direct.
constexpr int kWgradConfigs = 7;
constexpr int kWgradGemmConfigs = kWgradConfigs - 1;

inline WgradGeo make_wgrad_geo(const ConvProblem& p, const Chunks& ch, int BM, int BN) {
  WgradGeo g;
  g.RT = p.taps() * p.Cg;
  g.Jg = p.Cog();
  g.n_ntiles = ceil_div(g.Jg, BN);
  g.n_mtiles = ceil_div(g.RT, BM);
  g.n_tiles = g.n_ntiles * g.n_mtiles * p.G * ch.P;
  return g;
}

template <class Num, class Cfg, class I>
const char* launch_wgrad_gemm(const ConvProblem& p, const Chunks& ch, const void* x, const void* dy, void* ws,
                              cudaStream_t stream, const char* where) {
  using T = typename Num::T;
  const WgradGeo geo = make_wgrad_geo(p, ch, Cfg::BM, Cfg::BN);
  if (geo.n_tiles <= 0) return nullptr;
  const int eb = int(sizeof(T));
  const bool vec = p.layout == Layout::kNHWC && p.Cg % 4 == 0 && aligned_quads(x, eb) && p.Cog() % 4 == 0 &&
                   aligned_quads(dy, eb);
  auto kernel = vec ? &wgrad_gemm_kernel<Num, Cfg, I, true> : &wgrad_gemm_kernel<Num, Cfg, I, false>;
  return launch(kernel, grid_for(geo.n_tiles), Cfg::NT, stream, where, p, geo, ch, static_cast<const T*>(x),
                static_cast<const T*>(dy), static_cast<typename Num::S*>(ws));
}

using Wgrad128x128 = TileCfg<128, 128, 8, 8, 2>;
using Wgrad128x64 = TileCfg<128, 64, 8, 4, 2>;
using Wgrad64x64 = TileCfg<64, 64, 4, 4, 2>;
using Wgrad128x32 = TileCfg<128, 32, 4, 4, 2>;
using Wgrad64x32 = TileCfg<64, 32, 4, 4, 4>;  // 128 threads: small filters, few chunks
using Wgrad32x32 = TileCfg<32, 32, 4, 4, 8>;  // 64 threads

// Per-SM efficiency of the GEMM tiles relative to 128x128 (pick_config),
// measured on an H100: [native binary16 accumulation].
constexpr double kWgradEff[2][kWgradGemmConfigs] = {{1.0, 0.69, 0.42, 0.44, 0.44, 0.44},
                                                   {1.0, 0.70, 0.48, 0.45, 0.44, 0.46}};

template <class Num>
inline int choose_wgrad_config(const ConvProblem& p, const Chunks& ch) {
  const int forced = forced_tile(kWgradConfigs);
  if (forced >= 0) return forced;
  if (p.Cog() < 8) return kWgradGemmConfigs;
  const double* eff = kWgradEff[Num::kPacked ? 1 : 0];
  auto tiles = [&](int bm, int bn) { return make_wgrad_geo(p, ch, bm, bn).n_tiles; };
  const TileChoice c[kWgradGemmConfigs] = {
      tile_choice<Num, Wgrad128x128>(tiles, eff[0]), tile_choice<Num, Wgrad128x64>(tiles, eff[1]),
      tile_choice<Num, Wgrad64x64>(tiles, eff[2]),   tile_choice<Num, Wgrad128x32>(tiles, eff[3]),
      tile_choice<Num, Wgrad64x32>(tiles, eff[4]),   tile_choice<Num, Wgrad32x32>(tiles, eff[5])};
  return pick_config(c, kWgradGemmConfigs, sm_count());
}

template <class Num>
const char* launch_wgrad_parts(const ConvProblem& p, const Chunks& ch, const void* x, const void* dy, void* ws,
                               cudaStream_t stream, const char* where) {
  const int cfg = choose_wgrad_config<Num>(p, ch);
  return dispatch_index(p, [&](auto index) -> const char* {
    using I = decltype(index);
    switch (cfg) {
      case 0: return launch_wgrad_gemm<Num, Wgrad128x128, I>(p, ch, x, dy, ws, stream, where);
      case 1: return launch_wgrad_gemm<Num, Wgrad128x64, I>(p, ch, x, dy, ws, stream, where);
      case 2: return launch_wgrad_gemm<Num, Wgrad64x64, I>(p, ch, x, dy, ws, stream, where);
      case 3: return launch_wgrad_gemm<Num, Wgrad128x32, I>(p, ch, x, dy, ws, stream, where);
      case 4: return launch_wgrad_gemm<Num, Wgrad64x32, I>(p, ch, x, dy, ws, stream, where);
      case 5: return launch_wgrad_gemm<Num, Wgrad32x32, I>(p, ch, x, dy, ws, stream, where);
      default: {
        using T = typename Num::T;
        const i64 total = ch.P * p.filter_elems();
        return launch(&wgrad_direct_kernel<Num, I>, grid_for(ceil_div(total, 256)), 256, stream, where, p, ch,
                      static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<typename Num::S*>(ws));
      }
    }
  });
}

}  // namespace gpu
}  // namespace detconv
