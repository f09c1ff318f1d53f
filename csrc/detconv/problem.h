// One problem struct for every implementation: host kernels, CUDA kernels,
// the TensorFlow ops and the pybind module all derive output sizes, padding
// and tensor strides from here (CONTRACT.md, "Notation").
#pragma once
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define DC_HD __host__ __device__ __forceinline__
#else
#define DC_HD inline
#endif

namespace detconv {

using i64 = std::int64_t;

enum class DType : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 3 };
// kDefault: float32 for 16-bit inputs, the input type otherwise.
// kFloat16: native binary16 accumulation (float16 inputs only).
enum class Accum : int { kDefault = 0, kFloat16 = 1 };
// Memory layout of input-shaped and output-shaped tensors. Logical indices are
// always (n, h, w, c); the layout only changes strides, never a bit.
enum class Layout : int { kNHWC = 0, kNCHW = 1 };
enum class Padding : int { kValid = 0, kSame = 1, kExplicit = 2 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}
inline int dtype_size(DType t) {
  return t == DType::kFloat64 ? 8 : (t == DType::kFloat32 ? 4 : 2);
}

// Element strides of a logical (n, d, h, w, c) tensor; 2-D code sees depth 0
// only (`at`), 3-D code uses `at5`. NHWC/NCHW mean NDHWC/NCDHW with depth.
struct Strides4 {
  i64 n, h, w, c, d = 0;
  DC_HD i64 at(i64 in, i64 ih, i64 iw, i64 ic) const { return in * n + ih * h + iw * w + ic * c; }
  DC_HD i64 at5(i64 in, i64 id, i64 ih, i64 iw, i64 ic) const { return in * n + id * d + ih * h + iw * w + ic * c; }
};

DC_HD Strides4 make_strides(Layout layout, i64 D, i64 H, i64 W, i64 C) {
  Strides4 s;
  if (layout == Layout::kNHWC) {
    s.c = 1; s.w = C; s.h = W * C; s.d = H * W * C; s.n = D * H * W * C;
  } else {
    s.w = 1; s.h = W; s.d = H * W; s.c = D * H * W; s.n = C * D * H * W;
  }
  return s;
}
DC_HD Strides4 make_strides(Layout layout, i64 H, i64 W, i64 C) { return make_strides(layout, 1, H, W, C); }

// Depth (D, KD, OD, sd, dd, pf, pk) is the outermost spatial dimension
// (CONTRACT.md, "Three spatial dimensions"); its defaults make a 2-D problem
// (depth 1), so 2-D code that never reads them stays exact.
struct ConvProblem {
  i64 N = 0, H = 0, W = 0, C = 0;       // input x[n, h, w, c]
  i64 KH = 0, KW = 0, Cg = 0, Co = 0;   // filter f[kh, kw, i, o] (HWIO)
  i64 G = 1;                            // groups = C / Cg
  i64 sh = 1, sw = 1, dh = 1, dw = 1;   // strides, dilations
  i64 pt = 0, pb = 0, pl = 0, pr = 0;   // resolved padding
  i64 OH = 0, OW = 0;                   // output y[n, oh, ow, o]
  i64 D = 1, KD = 1, OD = 1;            // depth of input, filter, output
  i64 sd = 1, dd = 1, pf = 0, pk = 0;   // depth stride, dilation, padding front/back
  Layout layout = Layout::kNHWC;
  DType dtype = DType::kFloat32;
  Accum accum = Accum::kDefault;

  DC_HD i64 Cog() const { return Co / G; }                  // output channels per group
  DC_HD i64 group_of(i64 o) const { return o / (Co / G); }  // group of output channel o
  DC_HD i64 R() const { return N * OD * OH * OW; }          // dw reduction length
  DC_HD i64 taps() const { return KD * KH * KW; }
  DC_HD i64 filter_elems() const { return KD * KH * KW * Cg * Co; }
  DC_HD i64 x_elems() const { return N * D * H * W * C; }
  DC_HD i64 y_elems() const { return N * OD * OH * OW * Co; }
  DC_HD Strides4 x_strides() const { return make_strides(layout, D, H, W, C); }
  DC_HD Strides4 y_strides() const { return make_strides(layout, OD, OH, OW, Co); }
  DC_HD bool is_2d() const { return D == 1 && KD == 1 && OD == 1 && sd == 1 && dd == 1 && pf == 0 && pk == 0; }
  // Filter (D)HWIO offset.
  DC_HD i64 f_at(i64 kh, i64 kw, i64 i, i64 o) const { return ((kh * KW + kw) * Cg + i) * Co + o; }
  DC_HD i64 f_at5(i64 kd, i64 kh, i64 kw, i64 i, i64 o) const { return (((kd * KH + kh) * KW + kw) * Cg + i) * Co + o; }
};

// Fills padding and output size and validates every field. Returns an empty
// string on success, else a message that names the offending argument.
inline std::string finalize_problem(ConvProblem& p, Padding mode) {
  auto bad = [](const std::string& s) { return s; };
  if (p.N < 0 || p.H < 0 || p.W < 0 || p.C < 0) return bad("input: negative dimension");
  if (p.KH <= 0 || p.KW <= 0 || p.Cg <= 0 || p.Co <= 0)
    return bad("filters: every dimension must be positive (got a zero-size filter)");
  if (p.D < 0) return bad("input: negative dimension");
  if (p.KD <= 0) return bad("filters: every dimension must be positive (got a zero-size filter)");
  if (p.sh < 1 || p.sw < 1 || p.sd < 1) return bad("strides: must be >= 1");
  if (p.dh < 1 || p.dw < 1 || p.dd < 1) return bad("dilations: must be >= 1");
  if (p.C % p.Cg != 0)
    return bad("filters: input channels (" + std::to_string(p.C) +
               ") must be a multiple of the filter's in-channels (" + std::to_string(p.Cg) + ")");
  p.G = p.C / p.Cg;
  if (p.G < 1) return bad("filters: input channels must be positive");
  if (p.Co % p.G != 0)
    return bad("filters: out-channels (" + std::to_string(p.Co) +
               ") must be divisible by the number of groups (" + std::to_string(p.G) + ")");
  const i64 ekh = (p.KH - 1) * p.dh + 1, ekw = (p.KW - 1) * p.dw + 1, ekd = (p.KD - 1) * p.dd + 1;
  if (mode == Padding::kValid) {
    p.pt = p.pb = p.pl = p.pr = p.pf = p.pk = 0;
  } else if (mode == Padding::kSame) {
    const i64 oh = (p.H + p.sh - 1) / p.sh, ow = (p.W + p.sw - 1) / p.sw, od = (p.D + p.sd - 1) / p.sd;
    i64 th = (oh - 1) * p.sh + ekh - p.H, tw = (ow - 1) * p.sw + ekw - p.W, td = (od - 1) * p.sd + ekd - p.D;
    if (th < 0) th = 0;
    if (tw < 0) tw = 0;
    if (td < 0) td = 0;
    p.pt = th / 2; p.pb = th - p.pt; p.pl = tw / 2; p.pr = tw - p.pl; p.pf = td / 2; p.pk = td - p.pf;
  } else {
    if (p.pt < 0 || p.pb < 0 || p.pl < 0 || p.pr < 0 || p.pf < 0 || p.pk < 0)
      return bad("padding: explicit padding must be >= 0");
  }
  const i64 hh = p.H + p.pt + p.pb - ekh, ww = p.W + p.pl + p.pr - ekw, dd = p.D + p.pf + p.pk - ekd;
  if (hh < 0 || ww < 0 || dd < 0)
    return bad("filters: the (dilated) filter is larger than the padded input");
  p.OH = hh / p.sh + 1;
  p.OW = ww / p.sw + 1;
  p.OD = dd / p.sd + 1;
  if (p.dtype != DType::kFloat16 && p.accum == Accum::kFloat16)
    return bad("accumulation: 'float16' needs float16 inputs");
  return std::string();
}

}  // namespace detconv
