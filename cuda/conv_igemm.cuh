// Forward and input gradient as implicit GEMMs in the contract's fold order.
//
//   fprop (fprop_fold): rows = output pixels (n, od, oh, ow); columns = the
//     output channels of group g; K = (kd, kh, kw, i) flattened, ascending.
//     Padded taps are staged as +0 and folded like any other tap.
//   dgrad (dgrad_fold): rows = the input pixels of one stride phase
//     (id mod sd, ih mod sh, iw mod sw); columns = the input channels of
//     group g; K = taps (kd, kh, kw) ascending, each the group's output
//     channels o ascending. Within a phase, whether a tap's offset is a
//     multiple of the stride is the same for every pixel, so the block skips
//     taps that reach no output row at all; whether the output it reaches
//     lies inside the tensor is per pixel, and those rows are predicated off
//     for that tap (never fed zeros).
//
// Operands are staged through registers into double-buffered shared memory
// (one barrier per step): while a step's fmas run, the next step's quads are
// already in flight. A quad is 4 consecutive reduction indices of one row
// (A, and dgrad's B) or 4 consecutive columns of one reduction index (fprop's
// B); it is one vector load when the layout makes it contiguous and aligned,
// else 4 scalar loads. Offsets are 64-bit; divisions happen once per tile.
#pragma once
#include "common.cuh"
#include "gemm_core.cuh"

namespace detconv {
namespace gpu {

struct IgemmGeo {
  i64 Jg = 0, Kg = 0;  // columns per group (fprop Cog, dgrad Cg); reduction length per tap (Cg, Cog)
  i64 K = 0;           // fprop: taps * Cg; dgrad: Kg
  i64 n_ntiles = 0, n_mtiles = 0, n_tiles = 0;
};

// Tap and channel of one flattened forward reduction index k = tap * Cg + i.
template <class I>
struct FTap {
  I kd, kh, kw, i;
  __device__ __forceinline__ void set(const ConvProblem& p, I k) {
    I t;
    divmod(k, I(p.Cg), t, i);
    divmod(t, I(p.KW), t, kw);
    divmod(t, I(p.KH), kd, kh);
  }
  __device__ __forceinline__ void step1(const ConvProblem& p) {
    if (++i == I(p.Cg)) {
      i = 0;
      if (++kw == I(p.KW)) {
        kw = 0;
        if (++kh == I(p.KH)) { kh = 0; ++kd; }
      }
    }
  }
  __device__ __forceinline__ void step(const ConvProblem& p, I by) {
    i += by;
    while (i >= I(p.Cg)) {
      i -= I(p.Cg);
      if (++kw == I(p.KW)) {
        kw = 0;
        if (++kh == I(p.KH)) { kh = 0; ++kd; }
      }
    }
  }
};

// The input-gradient K cursor: tap t = (kd, kh, kw) and the chunk of output
// channels [o0, o0 + BK) it is at; bd/bh/bw: the output coordinate that
// phase-grid coordinate 0 reaches through the tap (out = b + q).
template <class I>
struct DTapCursor {
  I t = 0, kd = 0, kh = 0, kw = 0, o0 = 0, bd = 0, bh = 0, bw = 0;
  bool done = false;
  __device__ __forceinline__ void first(const ConvProblem& p, I phd, I phh, I phw) {
    t = -1; kd = 0; kh = 0; kw = -1; o0 = 0; bd = bh = bw = 0;
    next_tap(p, phd, phh, phw);
  }
  // a = b * q exactly (a may be negative)?
  static __device__ __forceinline__ bool exact(I a, I b, I& q) {
    q = a / b;
    return q * b == a;
  }
  __device__ __forceinline__ void next_tap(const ConvProblem& p, I phd, I phh, I phw) {
    const I taps = I(p.taps());
    for (;;) {
      ++t;
      if (++kw == I(p.KW)) {
        kw = 0;
        if (++kh == I(p.KH)) { kh = 0; ++kd; }
      }
      if (t >= taps) { done = true; return; }
      if (exact(phd + I(p.pf) - kd * I(p.dd), I(p.sd), bd) && exact(phh + I(p.pt) - kh * I(p.dh), I(p.sh), bh) &&
          exact(phw + I(p.pl) - kw * I(p.dw), I(p.sw), bw)) {
        done = false;
        return;
      }
    }
  }
  template <int BK>
  __device__ __forceinline__ void next(const ConvProblem& p, I Kg, I phd, I phh, I phw) {
    o0 += BK;
    if (o0 >= Kg) {
      o0 = 0;
      next_tap(p, phd, phh, phw);
    }
  }
};

// kVec: every operand quad is contiguous and aligned (one vector load each);
// else 4 scalar loads per quad.
template <class Num, bool kDgrad, class Cfg, class I, bool kVec>
__global__ void __launch_bounds__(Cfg::NT, min_blocks<Num, Cfg>())
igemm_kernel(const ConvProblem p, const IgemmGeo geo, const typename Num::T* __restrict__ a_src,
             const typename Num::T* __restrict__ filt, const typename Num::T* __restrict__ bias,
             typename Num::T* __restrict__ out) {
  using S = typename Num::S;
  using T = typename Num::T;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, NT = Cfg::NT;
  constexpr int QA = BM * BK / 4, QB = BN * BK / 4;  // quads per step
  constexpr int UA = (QA + NT - 1) / NT, UB = (QB + NT - 1) / NT;
  __shared__ Stages<S, Cfg> sm;
  __shared__ I pix_off[BM];     // output offset of channel 0 of each row; -1: beyond the tensor
  __shared__ I pix_q[3][BM];    // dgrad: phase-grid coordinates (d, h, w) of each row

  const int tid = threadIdx.x, tn = tid % Cfg::TPN, tm = tid / Cfg::TPN;
  const StridesI<I> as(kDgrad ? p.y_strides() : p.x_strides());
  const StridesI<I> os(kDgrad ? p.x_strides() : p.y_strides());
  const I Cog = I(p.Co) / I(p.G), Jg = I(geo.Jg), Kg = I(geo.Kg), K = I(geo.K);
  const I OD = I(p.OD), OH = I(p.OH), OW = I(p.OW), D = I(p.D), H = I(p.H), W = I(p.W);

  for (I tile = I(blockIdx.x); tile < I(geo.n_tiles); tile += I(gridDim.x)) {
    I rest = tile, nt, mt, g;
    divmod(rest, I(geo.n_ntiles), rest, nt);
    divmod(rest, I(geo.n_mtiles), rest, mt);
    divmod(rest, I(p.G), rest, g);
    // rows: output pixels (fprop) or the pixels of stride phase `rest` (dgrad)
    I phd = 0, phh = 0, phw = 0, ED = OD, EH = OH, EW = OW;
    if (kDgrad) {
      I t;
      divmod(rest, I(p.sw), t, phw);
      divmod(t, I(p.sh), phd, phh);
      ED = phd < D ? (D - phd + I(p.sd) - 1) / I(p.sd) : 0;
      EH = phh < H ? (H - phh + I(p.sh) - 1) / I(p.sh) : 0;
      EW = phw < W ? (W - phw + I(p.sw) - 1) / I(p.sw) : 0;
    }
    const I count = I(p.N) * ED * EH * EW;
    const I m0 = mt * BM, n0 = nt * BN;
    if (m0 >= count) continue;  // uniform over the block

    __syncthreads();  // the previous tile is done with shared memory
    for (int m = tid; m < BM; m += NT) {
      I off = -1;
      I q[3] = {0, 0, 0};
      if (m0 + m < count) {
        const Coord4<I> c = decode4(m0 + I(m), ED, EH, EW);
        off = kDgrad ? os.at(c.n, phd + c.d * I(p.sd), phh + c.h * I(p.sh), phw + c.w * I(p.sw), 0)
                     : os.at(c.n, c.d, c.h, c.w, 0);
        q[0] = c.d; q[1] = c.h; q[2] = c.w;
      }
      pix_off[m] = off;
      pix_q[0][m] = q[0]; pix_q[1][m] = q[1]; pix_q[2][m] = q[2];
    }

    // ---- per-thread loader state of A quads (row lm, reduction offset lk)
    bool la_ok[UA];
    I la_base[UA];                    // offset of image n
    I la_d[UA], la_h[UA], la_w[UA];   // fprop: id0/ih0/iw0 (tap 0); dgrad: qd/qh/qw
    FTap<I> la_tap[UA];               // fprop: tap of the quad's first index
#pragma unroll
    for (int u = 0; u < UA; ++u) {
      const int q = tid + u * NT;
      const int lm = q / (BK / 4), lk = (q % (BK / 4)) * 4;
      la_ok[u] = q < QA && m0 + lm < count;
      const Coord4<I> c = decode4(la_ok[u] ? m0 + I(lm) : I(0), ED, EH, EW);
      la_base[u] = c.n * as.n;
      if (kDgrad) {
        la_d[u] = c.d; la_h[u] = c.h; la_w[u] = c.w;
      } else {
        la_d[u] = c.d * I(p.sd) - I(p.pf); la_h[u] = c.h * I(p.sh) - I(p.pt); la_w[u] = c.w * I(p.sw) - I(p.pl);
        la_tap[u].set(p, I(lk));
      }
    }
    T ra[UA][4], rb[UB][4];

    // Loads the step at cursor (kk0: fprop's flattened index; dc: dgrad's tap cursor).
    auto load = [&](I kk0, const DTapCursor<I>& dc) {
#pragma unroll
      for (int u = 0; u < UA; ++u) {
        const int q = tid + u * NT;
        const int lk = (q % (BK / 4)) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) ra[u][j] = T(0);
        if (!la_ok[u]) continue;
        if (kDgrad) {
          const I o = dc.o0 + lk;
          const I od = dc.bd + la_d[u], oh = dc.bh + la_h[u], ow = dc.bw + la_w[u];
          if (o >= Kg || od < 0 || od >= OD || oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
          const T* src = a_src + (la_base[u] + od * as.d + oh * as.h + ow * as.w + (g * Cog + o) * as.c);
          if (kVec) {
            load_quad(src, ra[u]);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (o + j < Kg) ra[u][j] = src[j * as.c];
          }
        } else {
          const I kk = kk0 + lk;
          if (kk >= K) continue;
          FTap<I> t = la_tap[u];
          if (kVec) {  // Cg % 4 == 0: the quad shares one tap
            const I id = la_d[u] + t.kd * I(p.dd), ih = la_h[u] + t.kh * I(p.dh), iw = la_w[u] + t.kw * I(p.dw);
            if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
              load_quad(a_src + (la_base[u] + id * as.d + ih * as.h + iw * as.w + (g * I(p.Cg) + t.i)), ra[u]);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              if (kk + j >= K) break;
              const I id = la_d[u] + t.kd * I(p.dd), ih = la_h[u] + t.kh * I(p.dh), iw = la_w[u] + t.kw * I(p.dw);
              if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
                ra[u][j] = a_src[la_base[u] + id * as.d + ih * as.h + iw * as.w + (g * I(p.Cg) + t.i) * as.c];
              t.step1(p);
            }
          }
        }
      }
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int q = tid + u * NT;
#pragma unroll
        for (int j = 0; j < 4; ++j) rb[u][j] = T(0);
        if (q >= QB) continue;
        if (kDgrad) {  // B[k = o][n = i] = f[tap, i, g*Cog + o]: quads along o
          const int bn = q / (BK / 4), bk = (q % (BK / 4)) * 4;
          const I i = n0 + bn, o = dc.o0 + bk;
          if (i >= Jg || o >= Kg) continue;
          const T* src = filt + ((dc.t * I(p.Cg) + i) * I(p.Co) + g * Cog + o);
          if (kVec) {
            load_quad(src, rb[u]);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (o + j < Kg) rb[u][j] = src[j];
          }
        } else {  // B[k][n = o] = f[k, g*Cog + o]: quads along o
          const int bk = q / (BN / 4), bn = (q % (BN / 4)) * 4;
          const I kk = kk0 + bk, o = n0 + bn;
          if (kk >= K || o >= Jg) continue;
          const T* src = filt + (kk * I(p.Co) + g * Cog + o);
          if (kVec) {
            load_quad(src, rb[u]);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (o + j < Jg) rb[u][j] = src[j];
          }
        }
      }
    };
    // Converts the loaded quads to the accumulator type and stages them.
    auto stage = [&](int buf) {
      S* As = sm.a[buf];
      S* Bs = sm.b[buf];
#pragma unroll
      for (int u = 0; u < UA; ++u) {
        const int q = tid + u * NT;
        if (q >= QA) continue;
        const int lm = q / (BK / 4), lk = (q % (BK / 4)) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) As[(lk + j) * Cfg::LDA + lm] = Num::load(ra[u][j]);
      }
#pragma unroll
      for (int u = 0; u < UB; ++u) {
        const int q = tid + u * NT;
        if (q >= QB) continue;
        if (kDgrad) {
          const int bn = q / (BK / 4), bk = (q % (BK / 4)) * 4;
#pragma unroll
          for (int j = 0; j < 4; ++j) Bs[(bk + j) * Cfg::LDB + bn] = Num::load(rb[u][j]);
        } else {
          const int bk = q / (BN / 4), bn = (q % (BN / 4)) * 4;
          S v[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = Num::load(rb[u][j]);
          store_quad(Bs + bk * Cfg::LDB + bn, v);
        }
      }
    };

    // Rows whose output lies outside the tensor for the cursor's tap (dgrad): bit i clear.
    auto live_rows = [&](const DTapCursor<I>& c) {
      unsigned bits = 0;
#pragma unroll
      for (int i = 0; i < Cfg::TM; ++i) {
        const int m = Cfg::row(tm, i);
        const I od = c.bd + pix_q[0][m], oh = c.bh + pix_q[1][m], ow = c.bw + pix_q[2][m];
        if (od >= 0 && od < OD && oh >= 0 && oh < OH && ow >= 0 && ow < OW) bits |= 1u << i;
      }
      return bits;
    };

    constexpr unsigned kAllRows = (1u << Cfg::TM) - 1u;
    // dgrad with binary32 accumulators: predicated FFMAs everywhere (fma_if), as cheap as
    // plain ones. Choosing the plain fold for threads whose rows are all live made a warp
    // run both folds, one after the other, wherever its rows straddle an image edge: most
    // warps of a 56-pixel-wide layer.
    using Acc = Accum<Num, Cfg>;
    constexpr bool kPredAll = kDgrad && Acc::kPredFma;
    Acc acc;
    acc.zero();
    // The load cursor (fprop: flattened index kk; dgrad: tap cursor dc) runs one
    // step ahead of the fold, whose step is described by kc and live.
    I kk = 0;
    DTapCursor<I> dc;
    if (kDgrad) dc.first(p, phd, phh, phw);
    const bool have = kDgrad ? !dc.done : kk < K;
    // length of the step at the cursor (the last one, or a tap's last, may be short)
    auto step_len = [&]() { return int(kDgrad ? min64(BK, Kg - dc.o0) : min64(BK, K - kk)); };
    if (have) {
      load(kk, dc);
      stage(0);
    }
    __syncthreads();
    int buf = 0;
    int kc = step_len();
    I live_tap = dc.t;
    unsigned live = kDgrad && have ? live_rows(dc) : ~0u;
    while (have) {
      bool more;
      if (kDgrad) {
        dc.template next<BK>(p, Kg, phd, phh, phw);
        more = !dc.done;
      } else {
        kk += BK;
        more = kk < K;
#pragma unroll
        for (int u = 0; u < UA; ++u) la_tap[u].step(p, BK);
      }
      if (more) load(kk, dc);  // in flight during this step's fmas
      if (kPredAll || (kDgrad && live != kAllRows))
        acc.template fold<true>(sm.a[buf], sm.b[buf], kc, tm, tn, live);
      else  // interior rows: no predicates at all
        acc.template fold<false>(sm.a[buf], sm.b[buf], kc, tm, tn, live);
      if (!more) break;
      kc = step_len();
      if (kDgrad && dc.t != live_tap) {
        live_tap = dc.t;
        live = live_rows(dc);
      }
      stage(buf ^ 1);
      __syncthreads();
      buf ^= 1;
    }

    // ---- epilogue: (bias,) one rounding, canonical NaN, store in the layout
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i) {
      const I off = pix_off[Cfg::row(tm, i)];
      if (off < 0) continue;
#pragma unroll
      for (int j = 0; j < Cfg::TN; ++j) {
        const I n = n0 + Cfg::col(tn, j);
        if (n >= Jg) continue;
        S v = acc.get(i, j);
        I ch;
        if (kDgrad) {
          ch = g * I(p.Cg) + n;
        } else {
          ch = g * Cog + n;
          if (bias != nullptr) v = Num::add(v, Num::load(bias[ch]));
        }
        out[off + ch * os.c] = Num::store(v);
      }
    }
  }
}

template <bool kDgrad>
inline IgemmGeo make_igemm_geo(const ConvProblem& p, int BM, int BN) {
  IgemmGeo g;
  g.Jg = kDgrad ? p.Cg : p.Cog();
  g.Kg = kDgrad ? p.Cog() : p.Cg;
  g.K = kDgrad ? g.Kg : p.taps() * p.Cg;
  g.n_ntiles = ceil_div(g.Jg, BN);
  i64 rows, phases = 1;
  if (kDgrad) {
    rows = p.N * ceil_div(p.D, p.sd) * ceil_div(p.H, p.sh) * ceil_div(p.W, p.sw);  // phase 0 is the largest
    phases = p.sd * p.sh * p.sw;
  } else {
    rows = p.N * p.OD * p.OH * p.OW;
  }
  g.n_mtiles = ceil_div(rows, BM);
  g.n_tiles = g.n_ntiles * g.n_mtiles * p.G * phases;
  return g;
}

template <class Num, bool kDgrad, class Cfg, class I>
const char* launch_igemm(const ConvProblem& p, const void* a_src, const void* filt, const void* bias, void* out,
                         cudaStream_t stream, const char* where) {
  using T = typename Num::T;
  const IgemmGeo geo = make_igemm_geo<kDgrad>(p, Cfg::BM, Cfg::BN);
  if (geo.n_tiles <= 0) return nullptr;
  const int eb = int(sizeof(T));
  // A quads run along channels: contiguous in NHWC, aligned when the group width is a
  // multiple of 4; B quads run along the filter's output channels (both computations).
  const bool vec = p.layout == Layout::kNHWC && geo.Kg % 4 == 0 && aligned_quads(a_src, eb) && p.Cog() % 4 == 0 &&
                   aligned_quads(filt, eb);
  auto kernel = vec ? &igemm_kernel<Num, kDgrad, Cfg, I, true> : &igemm_kernel<Num, kDgrad, Cfg, I, false>;
  return launch(kernel, grid_for(geo.n_tiles), Cfg::NT, stream, where, p, geo, static_cast<const T*>(a_src),
                static_cast<const T*>(filt), static_cast<const T*>(bias), static_cast<T*>(out));
}

}  // namespace gpu
}  // namespace detconv
