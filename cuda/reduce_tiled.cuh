// Filter and bias gradients: the contract's shape-only chunks, computed in
// parallel into a workspace, then combined in chunk order (no atomics).
//
// Pass 1 (wgrad_part_kernel / bgrad_part_kernel) writes part[chunk][f] for
// every chunk and output f - each part folded in one thread over its chunk's
// r ascending, as wgrad_chunk_fold / bgrad_chunk_fold of order.h do.
// Pass 2 (combine_parts_kernel) adds the parts of each output in chunk order
// (combine_parts) and rounds once.
//
// wgrad tiles: an output dw[kh,kw,i,o] has row rho = (kh*KW + kw)*Cg + i and
// column o, so dw is a (KH*KW*Cg) x Co matrix (HWIO is exactly that, row-major).
// A block owns TI rows x TJ columns of one chunk; columns are a slice of one
// group, or `gb` whole groups side by side when groups are narrow (depthwise).
// For each step of KR reduction indices r the block stages the input values
// the tile's taps meet (Xs, +0 in padding, as the forward pass) and the dy
// values of its columns (Ds); each thread advances its RI x RJ parts by KR
// fmas in ascending r.
#pragma once
#include "common.cuh"
#include "conv_tiled.cuh"  // conv_col_use

namespace detconv {
namespace gpu {

struct WgradGeo {
  i64 RT = 0;            // rows: KH*KW*Cg
  i64 Jg = 0;            // columns per group: Cog
  i64 gb = 1;            // whole groups per column tile (1: tiles split a group)
  i64 jt_per_group = 1;  // column tiles per group when gb == 1
  i64 n_jtiles = 0;
  i64 ti = 0;            // rows per tile
  i64 n_itiles = 0;
  i64 n_tiles = 0;       // P * n_itiles * n_jtiles
  int chan_fast = 1;
};

template <int TI_, int TJ_, int RI_, int RJ_, int KR_, int XCOLS_>
struct WgradCfg {
  static constexpr int TI = TI_, TJ = TJ_, RI = RI_, RJ = RJ_, KR = KR_, XCOLS = XCOLS_;
  static constexpr int TIT = TI / RI, TJT = TJ / RJ, NT = TIT * TJT;
  static_assert(TI % RI == 0 && TJ % RJ == 0, "tile must split evenly");
  static_assert(XCOLS >= TI && XCOLS >= TJ, "X stage must hold a row tile and one column per packed group");
  static_assert(KR <= NT, "one thread decodes each staged r");
};
using WgradWide = WgradCfg<64, 64, 4, 4, 16, 64>;     // ordinary convolutions
using WgradFewRows = WgradCfg<16, 64, 1, 4, 16, 256>; // depthwise / few taps x in-channels
using WgradFewCols = WgradCfg<128, 8, 4, 1, 16, 128>; // few output channels

inline WgradGeo make_wgrad_geo(const ConvProblem& p, const Chunks& ch, int TI, int TJ, int XCOLS) {
  WgradGeo g;
  g.RT = p.KH * p.KW * p.Cg;
  g.Jg = p.Cog();
  if (g.Jg >= TJ || p.G == 1) {
    g.gb = 1;
    g.jt_per_group = ceil_div(g.Jg, TJ);
    g.n_jtiles = p.G * g.jt_per_group;
    g.ti = TI;
  } else {
    g.gb = min64(TJ / g.Jg, p.G);
    g.jt_per_group = 1;
    g.n_jtiles = ceil_div(p.G, g.gb);
    g.ti = min64(TI, XCOLS / g.gb);
    if (g.ti < 1) g.ti = 1;
  }
  g.n_itiles = ceil_div(g.RT, g.ti);
  g.n_tiles = ch.P * g.n_itiles * g.n_jtiles;
  g.chan_fast = p.layout == Layout::kNHWC ? 1 : 0;
  return g;
}

template <class Cfg>
inline double wgrad_use(const ConvProblem& p, const Chunks& ch) {
  const WgradGeo g = make_wgrad_geo(p, ch, Cfg::TI, Cfg::TJ, Cfg::XCOLS);
  const double rows = double(g.RT) / double(g.n_itiles * Cfg::TI);
  return rows * conv_col_use(g.Jg, p.G, Cfg::TJ);
}

template <class Num, class Cfg>
__global__ void __launch_bounds__(Cfg::NT)
wgrad_part_kernel(const ConvProblem p, const WgradGeo geo, const Chunks chunks, const typename Num::T* __restrict__ x,
                  const typename Num::T* __restrict__ dy, typename Num::S* __restrict__ ws) {
  using S = typename Num::S;
  constexpr int TI = Cfg::TI, TJ = Cfg::TJ, RI = Cfg::RI, RJ = Cfg::RJ, KR = Cfg::KR, TIT = Cfg::TIT,
                TJT = Cfg::TJT, NT = Cfg::NT;
  __shared__ S Xs[KR][Cfg::XCOLS + 1];  // [r - r0][gsub*ti + row]
  __shared__ S Ds[KR][TJ + 1];          // [r - r0][column]
  __shared__ i64 r_oh[KR], r_ow[KR], r_xn[KR], r_dy[KR];  // per staged r: oh, ow, x offset of image n, dy offset of channel 0
  __shared__ i64 row_kh[TI], row_kw[TI], row_i[TI];       // per tile row: tap and in-channel

  const int tid = threadIdx.x;
  const int tj = tid % TJT, ti_ = tid / TJT;
  const Strides4 xs = p.x_strides(), ys = p.y_strides();
  const i64 F = p.filter_elems(), Cog = p.Cog(), Jg = geo.Jg;

  for (i64 tile = blockIdx.x; tile < geo.n_tiles; tile += gridDim.x) {
    const i64 jt = tile % geo.n_jtiles;
    const i64 rest = tile / geo.n_jtiles;
    const i64 it = rest % geo.n_itiles;
    const i64 chunk = rest / geo.n_itiles;
    const ColumnTile ct = column_tile<TJ>(geo, jt, Jg, p.G);
    const i64 g_lo = ct.g_lo, j0 = ct.j0, to = ct.to, gbe = ct.gbe;
    const int ncols = int(gbe * to);
    const i64 rho0 = it * geo.ti;
    const int tie = int(min64(geo.ti, geo.RT - rho0));
    const int xcols = int(gbe) * tie;

    __syncthreads();  // previous tile done with row_*
    for (int a = tid; a < TI; a += NT) {
      const i64 rho = rho0 + (a < tie ? a : 0);
      const i64 t = rho / p.Cg;
      row_i[a] = rho % p.Cg;
      row_kh[a] = t / p.KW;
      row_kw[a] = t % p.KW;
    }
    int col_g[RJ];
#pragma unroll
    for (int b = 0; b < RJ; ++b) {
      const int j = tj + b * TJT;
      col_g[b] = j < ncols ? int(j / to) : 0;
    }

    S acc[RI][RJ];
#pragma unroll
    for (int a = 0; a < RI; ++a)
#pragma unroll
      for (int b = 0; b < RJ; ++b) acc[a][b] = Num::zero();

    const i64 r_begin = chunks.begin(chunk), r_end = chunks.end(chunk);
    for (i64 r0 = r_begin; r0 < r_end; r0 += KR) {
      const int kr = int(min64(KR, r_end - r0));
      __syncthreads();  // previous step done with Xs, Ds, r_* (and row_* written)
      if (tid < kr) {
        i64 n, oh, ow;
        split_r(p, r0 + tid, n, oh, ow);
        r_oh[tid] = oh;
        r_ow[tid] = ow;
        r_xn[tid] = n * xs.n;
        r_dy[tid] = ys.at(n, oh, ow, 0);
      }
      __syncthreads();
      // ---- stage x tap values (+0 in padding, exactly as the forward pass)
      for (int e = tid; e < kr * xcols; e += NT) {
        int k, col;
        if (geo.chan_fast) { col = e % xcols; k = e / xcols; } else { k = e % kr; col = e / kr; }
        const int gsub = col / tie, a = col % tie;
        const i64 ih = fprop_in_row(p, r_oh[k], row_kh[a]), iw = fprop_in_col(p, r_ow[k], row_kw[a]);
        S v = Num::zero();
        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W)
          v = Num::load(x[r_xn[k] + ih * xs.h + iw * xs.w + ((g_lo + gsub) * p.Cg + row_i[a]) * xs.c]);
        Xs[k][col] = v;
      }
      // ---- stage dy values
      for (int e = tid; e < kr * TJ; e += NT) {
        int k, j;
        if (geo.chan_fast) { j = e % TJ; k = e / TJ; } else { k = e % kr; j = e / kr; }
        S v = Num::zero();
        if (j < ncols) {
          const i64 o = (g_lo + j / to) * Cog + j0 + j % to;
          v = Num::load(dy[r_dy[k] + o * ys.c]);
        }
        Ds[k][j] = v;
      }
      __syncthreads();
      // ---- fold: part = fma(x, dy, part) for r ascending (one thread per part)
      for (int k = 0; k < kr; ++k) {
        S d[RJ];
#pragma unroll
        for (int b = 0; b < RJ; ++b) d[b] = Ds[k][tj + b * TJT];
        if (geo.gb == 1) {
#pragma unroll
          for (int a = 0; a < RI; ++a) {
            const S xv = Xs[k][ti_ + a * TIT];
#pragma unroll
            for (int b = 0; b < RJ; ++b) acc[a][b] = Num::fma(xv, d[b], acc[a][b]);
          }
        } else {
#pragma unroll
          for (int a = 0; a < RI; ++a)
#pragma unroll
            for (int b = 0; b < RJ; ++b)
              acc[a][b] = Num::fma(Xs[k][col_g[b] * tie + ti_ + a * TIT], d[b], acc[a][b]);
        }
      }
    }

    // ---- parts to the workspace: ws[chunk*F + rho*Co + o] (rho*Co + o is the HWIO offset)
    S* wp = ws + chunk * F;
#pragma unroll
    for (int a = 0; a < RI; ++a) {
      const int row = ti_ + a * TIT;
      if (row >= tie) continue;
#pragma unroll
      for (int b = 0; b < RJ; ++b) {
        const int j = tj + b * TJT;
        if (j >= ncols) continue;
        const i64 o = (g_lo + j / to) * Cog + j0 + j % to;
        wp[(rho0 + row) * p.Co + o] = acc[a][b];
      }
    }
  }
}

// bias gradient parts: one thread per (chunk, o); dy staged through shared memory
// so that both layouts read global memory coalesced.
template <class Num, int TO, int KR>
__global__ void __launch_bounds__(TO)
bgrad_part_kernel(const ConvProblem p, const Chunks chunks, i64 n_otiles, const typename Num::T* __restrict__ dy,
                  typename Num::S* __restrict__ ws) {
  using S = typename Num::S;
  static_assert(KR <= TO, "one thread decodes each staged r");
  __shared__ S Ds[KR][TO + 1];
  __shared__ i64 r_dy[KR];
  const int tid = threadIdx.x;
  const Strides4 ys = p.y_strides();
  const int chan_fast = p.layout == Layout::kNHWC;
  const i64 n_tiles = chunks.P * n_otiles;
  for (i64 tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const i64 chunk = tile / n_otiles, o0 = (tile % n_otiles) * TO;
    const int oe = int(min64(TO, p.Co - o0));
    S part = Num::zero();
    const i64 r_begin = chunks.begin(chunk), r_end = chunks.end(chunk);
    for (i64 r0 = r_begin; r0 < r_end; r0 += KR) {
      const int kr = int(min64(KR, r_end - r0));
      __syncthreads();
      if (tid < kr) {
        i64 n, oh, ow;
        split_r(p, r0 + tid, n, oh, ow);
        r_dy[tid] = ys.at(n, oh, ow, 0);
      }
      __syncthreads();
      for (int e = tid; e < kr * oe; e += TO) {
        int k, j;
        if (chan_fast) { j = e % oe; k = e / oe; } else { k = e % kr; j = e / kr; }
        Ds[k][j] = Num::load(dy[r_dy[k] + (o0 + j) * ys.c]);
      }
      __syncthreads();
      // part = add(part, dy[r, o]) for r ascending (bgrad_chunk_fold)
      if (tid < oe)
        for (int k = 0; k < kr; ++k) part = Num::add(part, Ds[k][tid]);
    }
    if (tid < oe) ws[chunk * p.Co + o0 + tid] = part;
  }
}

// s = part[0]; s = add(s, part[k]) for k = 1..P-1 (combine_parts); one rounding.
template <class Num>
__global__ void __launch_bounds__(256)
combine_parts_kernel(i64 F, Chunks chunks, const typename Num::S* __restrict__ ws, typename Num::T* __restrict__ out) {
  using S = typename Num::S;
  for (i64 f = i64(blockIdx.x) * blockDim.x + threadIdx.x; f < F; f += i64(gridDim.x) * blockDim.x) {
    const S s = combine_parts<S>(chunks, [&](i64 k) { return ws[k * F + f]; },
                                 [](S a, S b) { return Num::add(a, b); });
    out[f] = Num::store(s);
  }
}

template <class Num>
const char* launch_combine(i64 F, const Chunks& ch, const void* ws, void* out, cudaStream_t stream, const char* where) {
  if (F <= 0) return nullptr;
  return launch(&combine_parts_kernel<Num>, grid_for(ceil_div(F, 256)), 256, stream, where, F, ch,
                static_cast<const typename Num::S*>(ws), static_cast<typename Num::T*>(out));
}

template <class Num, class Cfg>
const char* launch_wgrad_parts(const ConvProblem& p, const Chunks& ch, const void* x, const void* dy, void* ws,
                               cudaStream_t stream, const char* where) {
  using T = typename Num::T;
  const WgradGeo geo = make_wgrad_geo(p, ch, Cfg::TI, Cfg::TJ, Cfg::XCOLS);
  if (geo.n_tiles <= 0) return nullptr;
  return launch(&wgrad_part_kernel<Num, Cfg>, grid_for(geo.n_tiles), Cfg::NT, stream, where, p, geo, ch,
                static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<typename Num::S*>(ws));
}

template <class Num>
const char* launch_wgrad(const ConvProblem& p, const void* x, const void* dy, void* dw, void* ws, cudaStream_t stream,
                         const char* where) {
  const Chunks ch = reduction_chunks(p.R(), p.filter_elems());
  if (ch.P > 0) {
    if (ws == nullptr) return "detconv wgrad_gpu: workspace is null";
    int cfg = forced_tile();  // testing knob; -1: choose by shape
    if (cfg < 0) {
      const double wide = wgrad_use<WgradWide>(p, ch), rows = wgrad_use<WgradFewRows>(p, ch),
                   cols = wgrad_use<WgradFewCols>(p, ch);
      cfg = (wide >= 0.5 || (wide >= rows && wide >= cols)) ? 0 : (rows >= cols ? 1 : 2);
    }
    const char* err;
    if (cfg == 1)
      err = launch_wgrad_parts<Num, WgradFewRows>(p, ch, x, dy, ws, stream, where);
    else if (cfg == 2)
      err = launch_wgrad_parts<Num, WgradFewCols>(p, ch, x, dy, ws, stream, where);
    else
      err = launch_wgrad_parts<Num, WgradWide>(p, ch, x, dy, ws, stream, where);
    if (err) return err;
  }
  return launch_combine<Num>(p.filter_elems(), ch, ws, dw, stream, where);
}

template <class Num>
const char* launch_bgrad(const ConvProblem& p, const void* dy, void* db, void* ws, cudaStream_t stream,
                         const char* where) {
  constexpr int TO = 128, KR = 32;
  const Chunks ch = reduction_chunks(p.R(), p.Co);
  if (ch.P > 0) {
    if (ws == nullptr) return "detconv bgrad_gpu: workspace is null";
    const i64 n_otiles = ceil_div(p.Co, TO);
    const char* err = launch(&bgrad_part_kernel<Num, TO, KR>, grid_for(ch.P * n_otiles), TO, stream, where, p, ch,
                             n_otiles, static_cast<const typename Num::T*>(dy), static_cast<typename Num::S*>(ws));
    if (err) return err;
  }
  return launch_combine<Num>(p.Co, ch, ws, db, stream, where);
}

}  // namespace gpu
}  // namespace detconv
