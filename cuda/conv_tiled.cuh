// Forward and input-gradient convolution: one tiled kernel for both.
//
// Both are a grouped "implicit GEMM" whose every output folds, in one thread,
// over the filter taps (kh, kw) ascending and then over a per-group reduction
// index k ascending - exactly the loop nests of order.h:
//
//   fprop (fprop_fold):  out = y[n,oh,ow,o],  k = i (input channel in group),
//                        a = x[n, fprop_in_row(oh,kh), fprop_in_col(ow,kw), g*Cg+k]  (+0 in padding),
//                        b = f[kh,kw,k,o];   then bias add, then one rounding.
//   dgrad (dgrad_fold):  out = dx[n,ih,iw,c], k = o - g*Cog (output channel in group),
//                        a = dy[n, dgrad_out_row(ih,kh), dgrad_out_col(iw,kw), g*Cog+k],
//                        b = f[kh,kw,c%Cg,g*Cog+k];  taps reaching no output are skipped.
//
// A block owns a tile of TP output pixels x TJ output channels ("columns").
// Columns are either a slice of one group's channels, or - when a group has
// fewer channels than the tile is wide (depthwise, narrow groups) - `gb` whole
// groups side by side. For each tap and each chunk of kc reduction indices the
// block stages the a-values of its pixels (As) and the b-values of its
// columns (Bs) in shared memory; each thread then advances the RP x RJ
// accumulators it owns by kc fmas each, in ascending k. Chunks and taps are
// visited in ascending order, so every accumulator sees the contract's
// sequence of fmas; tiling only decides which thread holds which output.
//
// dgrad with strides: input pixels are tiled per "phase" (ih mod sh, iw mod sw),
// so that whether a tap can reach an output at all is the same for the whole
// block (taps that cannot are skipped by the block, not multiplied by zero).
#pragma once
#include "common.cuh"

namespace detconv {
namespace gpu {

struct ConvGeo {
  i64 Jg = 0;            // outputs per group (fprop: Cog, dgrad: Cg)
  i64 Kg = 0;            // reduction length per group and tap (fprop: Cg, dgrad: Cog)
  i64 gb = 1;            // whole groups per column tile; 1: tiles split a group
  i64 jt_per_group = 1;  // column tiles per group when gb == 1
  i64 n_jtiles = 0;      // column tiles in all
  i64 kc = 1;            // reduction indices staged per step
  i64 n_ptiles = 0;      // pixel tiles (per phase for dgrad)
  i64 n_tiles = 0;       // all tiles (grid-stride loop bound)
  int chan_fast = 1;     // layout has channels contiguous (NHWC)
};

template <int TP_, int TJ_, int RP_, int RJ_, int KC_, int AROWS_>
struct ConvCfg {
  static constexpr int TP = TP_, TJ = TJ_, RP = RP_, RJ = RJ_, KC = KC_, AROWS = AROWS_;
  static constexpr int TPT = TP / RP, TJT = TJ / RJ, NT = TPT * TJT;
  static_assert(TP % RP == 0 && TJ % RJ == 0, "tile must split evenly");
  static_assert(AROWS >= KC && AROWS >= TJ, "A stage must hold a chunk and one row per packed group");
};

// Wide tiles for groups with many channels; a tall-narrow tile when every
// column tile would be mostly empty (few output channels, narrow groups).
// Small tiles when wide ones would leave most of the GPU idle (small batch and
// spatial size, many channels): more blocks, the same folds.
using ConvWide = ConvCfg<64, 64, 4, 4, 16, 64>;
using ConvNarrow = ConvCfg<128, 8, 4, 1, 16, 16>;
using ConvSmall = ConvCfg<32, 32, 2, 2, 16, 32>;

template <bool kDgrad>
inline ConvGeo make_conv_geo(const ConvProblem& p, int TP, int TJ, int KC, int AROWS) {
  ConvGeo g;
  g.Jg = kDgrad ? p.Cg : p.Cog();
  g.Kg = kDgrad ? p.Cog() : p.Cg;
  if (g.Jg >= TJ || p.G == 1) {
    g.gb = 1;
    g.jt_per_group = ceil_div(g.Jg, TJ);
    g.n_jtiles = p.G * g.jt_per_group;
  } else {
    g.gb = min64(TJ / g.Jg, p.G);
    g.jt_per_group = 1;
    g.n_jtiles = ceil_div(p.G, g.gb);
  }
  g.kc = min64(min64(KC, g.Kg), AROWS / g.gb);
  if (g.kc < 1) g.kc = 1;
  i64 pixels;
  if (kDgrad) {
    pixels = p.N * ceil_div(p.H, p.sh) * ceil_div(p.W, p.sw);  // largest phase (0, 0)
  } else {
    pixels = p.N * p.OH * p.OW;
  }
  g.n_ptiles = ceil_div(pixels, TP);
  const i64 phases = kDgrad ? p.sh * p.sw : 1;
  g.n_tiles = phases * g.n_ptiles * g.n_jtiles;
  g.chan_fast = p.layout == Layout::kNHWC ? 1 : 0;
  return g;
}

// Fraction of a tile's columns that hold real outputs (picks the tile shape).
inline double conv_col_use(i64 Jg, i64 G, int TJ) {
  if (Jg >= TJ || G == 1) return double(Jg) / double(ceil_div(Jg, TJ) * TJ);
  const i64 gb = min64(TJ / Jg, G);
  return double(gb * Jg) / double(TJ);
}

template <class Num, bool kDgrad, class Cfg>
__global__ void __launch_bounds__(Cfg::NT)
conv_tiled_kernel(const ConvProblem p, const ConvGeo geo, const typename Num::T* __restrict__ a_src,
                  const typename Num::T* __restrict__ filt, const typename Num::T* __restrict__ bias,
                  typename Num::T* __restrict__ out) {
  using S = typename Num::S;
  constexpr int TP = Cfg::TP, TJ = Cfg::TJ, RP = Cfg::RP, RJ = Cfg::RJ, TPT = Cfg::TPT, TJT = Cfg::TJT,
                NT = Cfg::NT;
  __shared__ S As[Cfg::AROWS][TP + 1];  // [group-in-tile * kc + k][pixel]; +1 avoids bank conflicts
  __shared__ S Bs[Cfg::KC][TJ + 1];     // [k][column]
  __shared__ i64 pix_n[TP], pix_h[TP], pix_w[TP];  // tile pixels; pix_n < 0: beyond the tensor
  __shared__ i64 tap_off[TP];                      // per tap: a-source offset of channel 0, or -1

  const int tid = threadIdx.x;
  const int tj = tid % TJT, tp = tid / TJT;
  // a-source tensor (x or dy) and output tensor (y or dx), both in the problem's layout.
  const Strides4 as = kDgrad ? p.y_strides() : p.x_strides();
  const Strides4 os = kDgrad ? p.x_strides() : p.y_strides();
  const i64 A_H = kDgrad ? p.OH : p.H, A_W = kDgrad ? p.OW : p.W;
  const i64 Jg = geo.Jg, Kg = geo.Kg, Cog = p.Cog();

  for (i64 tile = blockIdx.x; tile < geo.n_tiles; tile += gridDim.x) {
    const i64 jt = tile % geo.n_jtiles;
    const i64 ptile_all = tile / geo.n_jtiles;
    // ---- which pixels
    i64 ph_h = 0, ph_w = 0, ptile = ptile_all, Ah = 0, Aw = 0, count;
    if (kDgrad) {
      const i64 phase = ptile_all / geo.n_ptiles;
      ptile = ptile_all % geo.n_ptiles;
      ph_h = phase / p.sw;
      ph_w = phase % p.sw;
      Ah = ph_h < p.H ? ceil_div(p.H - ph_h, p.sh) : 0;
      Aw = ph_w < p.W ? ceil_div(p.W - ph_w, p.sw) : 0;
      count = p.N * Ah * Aw;
    } else {
      count = p.N * p.OH * p.OW;
    }
    const i64 q0 = ptile * TP;
    if (q0 >= count) continue;  // uniform over the block
    // ---- which columns
    const ColumnTile ct = column_tile<TJ>(geo, jt, Jg, p.G);
    const i64 g_lo = ct.g_lo, j0 = ct.j0, to = ct.to, gbe = ct.gbe;
    const int ncols = int(gbe * to);

    __syncthreads();  // the previous tile is done with pix_*
    for (int q = tid; q < TP; q += NT) {
      const i64 qq = q0 + q;
      if (qq < count) {
        i64 n, h, w;
        if (kDgrad) {
          w = qq % Aw;
          const i64 t = qq / Aw;
          h = t % Ah;
          n = t / Ah;
          h = ph_h + h * p.sh;
          w = ph_w + w * p.sw;
        } else {
          split_r(p, qq, n, h, w);  // r = (n*OH + oh)*OW + ow
        }
        pix_n[q] = n; pix_h[q] = h; pix_w[q] = w;
      } else {
        pix_n[q] = -1; pix_h[q] = 0; pix_w[q] = 0;
      }
    }
    __syncthreads();

    // Per-thread columns: group-in-tile of each owned column.
    int col_g[RJ];
#pragma unroll
    for (int r = 0; r < RJ; ++r) {
      const int j = tj + r * TJT;
      col_g[r] = j < ncols ? int(j / to) : 0;
    }

    S acc[RP][RJ];
#pragma unroll
    for (int q = 0; q < RP; ++q)
#pragma unroll
      for (int r = 0; r < RJ; ++r) acc[q][r] = Num::zero();

    for (i64 kh = 0; kh < p.KH; ++kh) {
      if (kDgrad) {
        // Same answer for every pixel of the phase: skip taps that reach no output row.
        const i64 t = ph_h + p.pt - kh * p.dh;
        if (((t % p.sh) + p.sh) % p.sh != 0) continue;
      }
      for (i64 kw = 0; kw < p.KW; ++kw) {
        if (kDgrad) {
          const i64 t = ph_w + p.pl - kw * p.dw;
          if (((t % p.sw) + p.sw) % p.sw != 0) continue;
        }
        // Offset of each tile pixel's a-value row for this tap (channel 0), or -1 when
        // the tap lands in padding (fprop: folds +0) or reaches no output (dgrad: skipped).
        for (int q = tid; q < TP; q += NT) {
          i64 off = -1;
          const i64 n = pix_n[q];
          if (n >= 0) {
            i64 ah, aw;
            if (kDgrad) {
              ah = dgrad_out_row(p, pix_h[q], kh);
              aw = dgrad_out_col(p, pix_w[q], kw);
            } else {
              ah = fprop_in_row(p, pix_h[q], kh);
              aw = fprop_in_col(p, pix_w[q], kw);
            }
            if (ah >= 0 && ah < A_H && aw >= 0 && aw < A_W) off = as.at(n, ah, aw, 0);
          }
          tap_off[q] = off;
        }
        __syncthreads();
        bool live[RP];
#pragma unroll
        for (int q = 0; q < RP; ++q) live[q] = kDgrad ? tap_off[tp + q * TPT] >= 0 : true;
        for (i64 k0 = 0; k0 < Kg; k0 += geo.kc) {
          const int kc = int(min64(geo.kc, Kg - k0));
          const int rows = int(gbe) * kc;
          // ---- stage a-values: As[gsub*kc + k][q]
          for (int e = tid; e < rows * TP; e += NT) {
            int row, q;
            if (geo.chan_fast) { row = e % rows; q = e / rows; } else { q = e % TP; row = e / TP; }
            const int gsub = row / kc, k = row % kc;
            const i64 ch = (g_lo + gsub) * Kg + k0 + k;  // x channel g*Cg+i, or dy channel g*Cog+o'
            const i64 off = tap_off[q];
            As[row][q] = off >= 0 ? Num::load(a_src[off + ch * as.c]) : Num::zero();
          }
          // ---- stage b-values: Bs[k][j]
          for (int e = tid; e < kc * TJ; e += NT) {
            int k, j;
            // fprop reads f[kh,kw,k,o] along o (contiguous); dgrad reads f[kh,kw,i,o] along o = k.
            if (kDgrad) { k = e % kc; j = e / kc; } else { j = e % TJ; k = e / TJ; }
            S v = Num::zero();
            if (j < ncols) {
              const i64 gsub = j / to, jj = j0 + j % to, g = g_lo + gsub;
              const i64 off = kDgrad ? p.f_at(kh, kw, jj, g * Cog + k0 + k) : p.f_at(kh, kw, k0 + k, g * Cog + jj);
              v = Num::load(filt[off]);
            }
            Bs[k][j] = v;
          }
          __syncthreads();
          // ---- fold: acc[q][r] = fma(a, b, acc) for k ascending (one thread per output)
          if (geo.gb == 1) {
            for (int k = 0; k < kc; ++k) {
              S b[RJ];
#pragma unroll
              for (int r = 0; r < RJ; ++r) b[r] = Bs[k][tj + r * TJT];
#pragma unroll
              for (int q = 0; q < RP; ++q) {
                if (!live[q]) continue;
                const S a = As[k][tp + q * TPT];
#pragma unroll
                for (int r = 0; r < RJ; ++r) acc[q][r] = Num::fma(a, b[r], acc[q][r]);
              }
            }
          } else {
            for (int k = 0; k < kc; ++k) {
#pragma unroll
              for (int r = 0; r < RJ; ++r) {
                const S b = Bs[k][tj + r * TJT];
                const int row = col_g[r] * kc + k;
#pragma unroll
                for (int q = 0; q < RP; ++q)
                  if (live[q]) acc[q][r] = Num::fma(As[row][tp + q * TPT], b, acc[q][r]);
              }
            }
          }
          __syncthreads();
        }
      }
    }

    // ---- epilogue: (bias,) one rounding, canonical NaN, store in the layout
#pragma unroll
    for (int q = 0; q < RP; ++q) {
      const int pq = tp + q * TPT;
      const i64 n = pix_n[pq];
      if (n < 0) continue;
#pragma unroll
      for (int r = 0; r < RJ; ++r) {
        const int j = tj + r * TJT;
        if (j >= ncols) continue;
        const i64 g = g_lo + j / to, jj = j0 + j % to;
        S v = acc[q][r];
        i64 ch;
        if (kDgrad) {
          ch = g * p.Cg + jj;
        } else {
          ch = g * Cog + jj;
          if (bias != nullptr) v = Num::add(v, Num::load(bias[ch]));
        }
        out[os.at(n, pix_h[pq], pix_w[pq], ch)] = Num::store(v);
      }
    }
  }
}

template <class Num, bool kDgrad, class Cfg>
const char* launch_conv(const ConvProblem& p, const void* a_src, const void* filt, const void* bias, void* out,
                        cudaStream_t stream, const char* where) {
  using T = typename Num::T;
  const ConvGeo geo = make_conv_geo<kDgrad>(p, Cfg::TP, Cfg::TJ, Cfg::KC, Cfg::AROWS);
  if (geo.n_tiles <= 0) return nullptr;
  return launch(&conv_tiled_kernel<Num, kDgrad, Cfg>, grid_for(geo.n_tiles), Cfg::NT, stream, where, p, geo,
                static_cast<const T*>(a_src), static_cast<const T*>(filt), static_cast<const T*>(bias),
                static_cast<T*>(out));
}

template <class Num, bool kDgrad>
const char* launch_conv_any(const ConvProblem& p, const void* a_src, const void* filt, const void* bias, void* out,
                            cudaStream_t stream, const char* where) {
  const i64 Jg = kDgrad ? p.Cg : p.Cog();
  int cfg = forced_tile();  // testing knob; -1: choose by shape
  if (cfg < 0) {
    const double wide = conv_col_use(Jg, p.G, ConvWide::TJ), narrow = conv_col_use(Jg, p.G, ConvNarrow::TJ);
    const i64 wide_tiles = make_conv_geo<kDgrad>(p, ConvWide::TP, ConvWide::TJ, ConvWide::KC, ConvWide::AROWS).n_tiles;
    if (wide < 0.5 && narrow > wide)
      cfg = 1;
    else if (wide_tiles < kFewBlocks)
      cfg = 2;
    else
      cfg = 0;
  }
  switch (cfg) {
    case 1: return launch_conv<Num, kDgrad, ConvNarrow>(p, a_src, filt, bias, out, stream, where);
    case 2: return launch_conv<Num, kDgrad, ConvSmall>(p, a_src, filt, bias, out, stream, where);
    default: return launch_conv<Num, kDgrad, ConvWide>(p, a_src, filt, bias, out, stream, where);
  }
}

}  // namespace gpu
}  // namespace detconv
