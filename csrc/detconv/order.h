// THE summation order (docs/contract.md, order version 1), written once.
//
// Every implementation - the host SIMD kernels, the CUDA kernels and (in
// Python) detconv/reference.py - folds each output exactly as the loop nests
// below do. Kernels may choose which outputs (or dw chunks) they compute
// together and how they are laid out in registers; they never reorder, split
// or reassociate one output's fold. The SIMD kernels keep these nests and
// put different outputs in different vector lanes.
#pragma once
#include "detconv/problem.h"

namespace detconv {

constexpr int kOrderVersion = 1;

// ---------------------------------------------------------------- index math
// Input row/column/depth slice that filter tap k meets for output `out`.
DC_HD i64 fprop_in_row(const ConvProblem& p, i64 oh, i64 kh) { return oh * p.sh + kh * p.dh - p.pt; }
DC_HD i64 fprop_in_col(const ConvProblem& p, i64 ow, i64 kw) { return ow * p.sw + kw * p.dw - p.pl; }
// The outputs ow in [fprop_first_out, fprop_end_out) meet a column inside the row at tap kw (the range may be empty).
DC_HD i64 fprop_first_out(const ConvProblem& p, i64 kw) {
  const i64 t = p.pl - kw * p.dw;
  return t <= 0 ? 0 : (t + p.sw - 1) / p.sw;
}
DC_HD i64 fprop_end_out(const ConvProblem& p, i64 kw) {
  const i64 t = p.W - 1 + p.pl - kw * p.dw, e = t < 0 ? 0 : t / p.sw + 1;
  return e < p.OW ? e : p.OW;
}
DC_HD i64 fprop_in_dep(const ConvProblem& p, i64 od, i64 kd) { return od * p.sd + kd * p.dd - p.pf; }

// dgrad: output row (column, depth slice) that input row ih reaches through tap kh, or -1 if none.
// t = s*out exactly, 0 <= out < n; stride 1 skips the two divisions (they dominated small kernels' blocks).
DC_HD i64 dgrad_out_index(i64 t, i64 s, i64 n) {
  if (s == 1) return t >= 0 && t < n ? t : -1;
  if (t < 0 || t % s != 0 || t / s >= n) return -1;
  return t / s;
}
DC_HD i64 dgrad_out_row(const ConvProblem& p, i64 ih, i64 kh) { return dgrad_out_index(ih + p.pt - kh * p.dh, p.sh, p.OH); }
DC_HD i64 dgrad_out_col(const ConvProblem& p, i64 iw, i64 kw) { return dgrad_out_index(iw + p.pl - kw * p.dw, p.sw, p.OW); }
DC_HD i64 dgrad_out_dep(const ConvProblem& p, i64 id, i64 kd) { return dgrad_out_index(id + p.pf - kd * p.dd, p.sd, p.OD); }

// ------------------------------------------------------------ forward fold
// y[n,od,oh,ow,o] = round(add(fold_{kd,kh,kw,i} fma(x, f, acc), bias)).
// x_at(n, id, ih, iw, c) and f_at(kd, kh, kw, i, o) return accumulator-typed
// values; fma(a, b, c) is the accumulator's IEEE fused multiply-add. A 2-D
// problem is depth 1 (od = id = kd = 0).
template <class Acc, class XAt, class FAt, class Fma>
DC_HD Acc fprop_fold(const ConvProblem& p, i64 n, i64 od, i64 oh, i64 ow, i64 o, XAt x_at, FAt f_at, Fma fma) {
  const i64 c0 = p.group_of(o) * p.Cg;
  Acc acc = Acc(0);
  for (i64 kd = 0; kd < p.KD; ++kd) {
    const i64 id = fprop_in_dep(p, od, kd);
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 ih = fprop_in_row(p, oh, kh);
      for (i64 kw = 0; kw < p.KW; ++kw) {
        const i64 iw = fprop_in_col(p, ow, kw);
        const bool inside = id >= 0 && id < p.D && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
        for (i64 i = 0; i < p.Cg; ++i) {
          const Acc v = inside ? x_at(n, id, ih, iw, c0 + i) : Acc(0);  // padded taps: fma with +0
          acc = fma(v, f_at(kd, kh, kw, i, o), acc);
        }
      }
    }
  }
  return acc;
}

// ----------------------------------------------------- input-gradient fold
// The filter rows (kd, kh) through which input row (id, ih) reaches an output row (od, oh), in fold
// order, skipping the rows that reach none: for (DgradReachedRows r(p, id, ih); r.next();) ...
// (a loop, not a callback, so that kernels compiled for an ISA inline it into their own loops).
struct DgradReachedRows {
  DC_HD DgradReachedRows(const ConvProblem& p, i64 id, i64 ih) : p_(p), id_(id), ih_(ih) {}
  // Moves to the next such row; false past the last.
  DC_HD bool next() {
    for (++kh; kd < p_.KD; ++kd, kh = 0) {
      od = dgrad_out_dep(p_, id_, kd);
      if (od < 0) continue;
      for (; kh < p_.KH; ++kh) {
        oh = dgrad_out_row(p_, ih_, kh);
        if (oh >= 0) return true;
      }
    }
    return false;
  }
  i64 kd = 0, kh = -1, od = -1, oh = -1;

 private:
  const ConvProblem& p_;
  i64 id_, ih_;
};

// dx[n,id,ih,iw,c] = round(fold_{kd,kh,kw,o in group(c) ascending} fma(dy, f, acc)).
// Taps that reach no output are skipped, not multiplied by zero.
template <class Acc, class DyAt, class FAt, class Fma>
DC_HD Acc dgrad_fold(const ConvProblem& p, i64 n, i64 id, i64 ih, i64 iw, i64 c, DyAt dy_at, FAt f_at, Fma fma) {
  const i64 g = c / p.Cg, i = c % p.Cg, cog = p.Cog();
  Acc acc = Acc(0);
  for (DgradReachedRows r(p, id, ih); r.next();) {
    for (i64 kw = 0; kw < p.KW; ++kw) {
      const i64 ow = dgrad_out_col(p, iw, kw);
      if (ow < 0) continue;
      for (i64 o = g * cog; o < (g + 1) * cog; ++o)
        acc = fma(dy_at(n, r.od, r.oh, ow, o), f_at(r.kd, r.kh, kw, i, o), acc);
    }
  }
  return acc;
}

// ------------------------------------------------ filter/bias-gradient chunks
// The reduction over r = ((n*OD + od)*OH + oh)*OW + ow is cut into P chunks of length L
// that depend on the shape alone: part[p] folds its chunk in ascending r, then
// s = part[0] + part[1] + ... in chunk order. F = KD*KH*KW*Cg*Co for dw, Co for db.
struct Chunks {
  i64 R, L, P;
  DC_HD i64 begin(i64 chunk) const { return chunk * L; }
  DC_HD i64 end(i64 chunk) const { return (chunk + 1) * L < R ? (chunk + 1) * L : R; }
};

DC_HD Chunks reduction_chunks(i64 R, i64 F) {
  Chunks c;
  c.R = R;
  if (R <= 0 || F <= 0) { c.L = 0; c.P = 0; return c; }  // dw = +0 everywhere (or no dw at all)
  const i64 a = ((i64(1) << 22) + F - 1) / F, b = (R + 63) / 64;
  i64 p0 = a < b ? a : b;
  if (p0 < 1) p0 = 1;
  c.L = (R + p0 - 1) / p0;
  c.P = (R + c.L - 1) / c.L;
  return c;
}

// Decodes r into (n, oh, ow) (2-D problems) or (n, od, oh, ow).
DC_HD void split_r(const ConvProblem& p, i64 r, i64& n, i64& oh, i64& ow) {
  ow = r % p.OW;
  const i64 t = r / p.OW;
  oh = t % p.OH;
  n = t / p.OH;
}
DC_HD void split_r(const ConvProblem& p, i64 r, i64& n, i64& od, i64& oh, i64& ow) {
  i64 t;
  split_r(p, r, t, oh, ow);  // t = n*OD + od
  od = t % p.OD;
  n = t / p.OD;
}

// One dw chunk: part = fold_{r in chunk, ascending} fma(x tap value (+0 in padding), dy[r, o], part).
template <class Acc, class XAt, class DyAt, class Fma>
DC_HD Acc wgrad_chunk_fold(const ConvProblem& p, const Chunks& ch, i64 chunk, i64 kd, i64 kh, i64 kw, i64 i, i64 o,
                           XAt x_at, DyAt dy_at, Fma fma) {
  const i64 c = p.group_of(o) * p.Cg + i;
  Acc part = Acc(0);
  for (i64 r = ch.begin(chunk); r < ch.end(chunk); ++r) {
    i64 n, od, oh, ow;
    split_r(p, r, n, od, oh, ow);
    const i64 id = fprop_in_dep(p, od, kd), ih = fprop_in_row(p, oh, kh), iw = fprop_in_col(p, ow, kw);
    const bool inside = id >= 0 && id < p.D && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
    const Acc v = inside ? x_at(n, id, ih, iw, c) : Acc(0);
    part = fma(v, dy_at(n, od, oh, ow, o), part);
  }
  return part;
}

// One db chunk: part = fold_{r in chunk, ascending} add(part, dy[r, o]).
template <class Acc, class DyAt, class Add>
DC_HD Acc bgrad_chunk_fold(const ConvProblem& p, const Chunks& ch, i64 chunk, i64 o, DyAt dy_at, Add add) {
  Acc part = Acc(0);
  for (i64 r = ch.begin(chunk); r < ch.end(chunk); ++r) {
    i64 n, od, oh, ow;
    split_r(p, r, n, od, oh, ow);
    part = add(part, dy_at(n, od, oh, ow, o));
  }
  return part;
}

// Chunk parts are combined in chunk order: s = part[0]; s = add(s, part[k]) for k = 1..P-1.
template <class Acc, class PartAt, class Add>
DC_HD Acc combine_parts(const Chunks& ch, PartAt part_at, Add add) {
  if (ch.P == 0) return Acc(0);
  Acc s = part_at(0);
  for (i64 k = 1; k < ch.P; ++k) s = add(s, part_at(k));
  return s;
}

}  // namespace detconv
