// Forward and input gradient with one thread per output: the fold of
// order.h written out, reading operands straight from global memory (cached).
// Used where a GEMM tile would be mostly empty - depthwise and other narrow
// groups - and as a configuration the tests can force on any problem.
// Consecutive threads take consecutive channels, so NHWC reads and writes
// coalesce; for depthwise layers the work is memory-bound either way.
#pragma once
#include "common.cuh"

namespace detconv {
namespace gpu {

// Output coordinate that input coordinate `in` reaches through tap k (as
// dgrad_out_row of order.h), or -1: t = in + pad - k*dil must be a
// non-negative multiple of the stride with t / stride < out.
template <class I>
__device__ __forceinline__ I reach(I in, I pad, I k, I dil, I stride, I out) {
  const I t = in + pad - k * dil;
  if (t < 0) return -1;
  I q, r;
  divmod(t, stride, q, r);
  return (r == 0 && q < out) ? q : I(-1);
}

template <class Num, bool kDgrad, class I>
__global__ void __launch_bounds__(256)
direct_conv_kernel(const ConvProblem p, const i64 total, const typename Num::T* __restrict__ a_src,
                   const typename Num::T* __restrict__ filt, const typename Num::T* __restrict__ bias,
                   typename Num::T* __restrict__ out) {
  using S = typename Num::S;
  const StridesI<I> xs(p.x_strides()), ys(p.y_strides());
  const I Cg = I(p.Cg), Co = I(p.Co), Cog = Co / I(p.G);  // 32-bit division for I = int
  const I D = I(p.D), H = I(p.H), W = I(p.W);
  for (I e = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); e < I(total); e += I(gridDim.x) * I(blockDim.x)) {
    S acc = Num::zero();
    if (!kDgrad) {  // fprop_fold: kd, kh, kw, then i ascending; padded taps fold +0
      I o, m;
      divmod(e, Co, m, o);
      const Coord4<I> c = decode4(m, I(p.OD), I(p.OH), I(p.OW));
      const I c0 = (o / Cog) * Cg;
      const typename Num::T* fp = filt + o;  // f[kd, kh, kw, i, o], taps in order
      for (I kd = 0; kd < I(p.KD); ++kd) {
        const I id = c.d * I(p.sd) + kd * I(p.dd) - I(p.pf);
        for (I kh = 0; kh < I(p.KH); ++kh) {
          const I ih = c.h * I(p.sh) + kh * I(p.dh) - I(p.pt);
          for (I kw = 0; kw < I(p.KW); ++kw, fp += Cg * Co) {
            const I iw = c.w * I(p.sw) + kw * I(p.dw) - I(p.pl);
            const bool inside = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
            const typename Num::T* xp = a_src + (inside ? xs.at(c.n, id, ih, iw, c0) : 0);
            for (I i = 0; i < Cg; ++i) {
              const S v = inside ? Num::load(xp[i * xs.c]) : Num::zero();
              acc = Num::fma(v, Num::load(fp[i * Co]), acc);
            }
          }
        }
      }
      if (bias != nullptr) acc = Num::add(acc, Num::load(bias[o]));
      out[ys.at(c.n, c.d, c.h, c.w, o)] = Num::store(acc);
    } else {  // dgrad_fold: kd, kh, kw, then o ascending; taps reaching no output skipped
      I ch, m, g, i;
      divmod(e, I(p.C), m, ch);
      const Coord4<I> c = decode4(m, D, H, W);
      divmod(ch, Cg, g, i);
      for (I kd = 0; kd < I(p.KD); ++kd) {
        const I od = reach(c.d, I(p.pf), kd, I(p.dd), I(p.sd), I(p.OD));
        if (od < 0) continue;
        for (I kh = 0; kh < I(p.KH); ++kh) {
          const I oh = reach(c.h, I(p.pt), kh, I(p.dh), I(p.sh), I(p.OH));
          if (oh < 0) continue;
          for (I kw = 0; kw < I(p.KW); ++kw) {
            const I ow = reach(c.w, I(p.pl), kw, I(p.dw), I(p.sw), I(p.OW));
            if (ow < 0) continue;
            const typename Num::T* dp = a_src + ys.at(c.n, od, oh, ow, g * Cog);
            const typename Num::T* fp = filt + ((((kd * I(p.KH) + kh) * I(p.KW) + kw) * Cg + i) * Co + g * Cog);
            for (I o = 0; o < Cog; ++o) acc = Num::fma(Num::load(dp[o * ys.c]), Num::load(fp[o]), acc);
          }
        }
      }
      out[xs.at(c.n, c.d, c.h, c.w, ch)] = Num::store(acc);
    }
  }
}

template <class Num, bool kDgrad, class I>
const char* launch_direct_conv(const ConvProblem& p, const void* a_src, const void* filt, const void* bias, void* out,
                               cudaStream_t stream, const char* where) {
  using T = typename Num::T;
  const i64 total = kDgrad ? p.x_elems() : p.y_elems();
  if (total <= 0) return nullptr;
  return launch(&direct_conv_kernel<Num, kDgrad, I>, grid_for(ceil_div(total, 256)), 256, stream, where, p, total,
                static_cast<const T*>(a_src), static_cast<const T*>(filt), static_cast<const T*>(bias),
                static_cast<T*>(out));
}

}  // namespace gpu
}  // namespace detconv
