// One problem struct for every implementation: host kernels, CUDA kernels,
// the TensorFlow ops and the pybind module all derive output sizes, padding
// and tensor strides from here (docs/contract.md, "Notation").
#pragma once
#include <cstdint>
#include <initializer_list>
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
// (docs/contract.md, "Notation": 2-D is depth 1); its defaults make a 2-D problem
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
  // Filter (D)HWIO offset.
  DC_HD i64 f_at(i64 kh, i64 kw, i64 i, i64 o) const { return ((kh * KW + kw) * Cg + i) * Co + o; }
  DC_HD i64 f_at5(i64 kd, i64 kh, i64 kw, i64 i, i64 o) const { return (((kd * KH + kh) * KW + kw) * Cg + i) * Co + o; }
};

// Largest element count of any tensor of a problem (input, output, filter):
// every offset, and every product of a count with an element size, stays far
// below 2^63.
constexpr i64 kMaxElements = i64(1) << 56;

// ceil(a / b) for a >= 0 and b > 0, a below 2^62 (blocks, tiles, chunks; resolve_dim
// writes SAME's output size without the add, as sizes there are not checked yet).
DC_HD i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

namespace problem_detail {
// a*b and a+b that report overflow instead of wrapping.
inline bool mul(i64 a, i64 b, i64* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add(i64 a, i64 b, i64* out) { return !__builtin_add_overflow(a, b, out); }
// a*b*...; false on overflow or past kMaxElements.
inline bool count(std::initializer_list<i64> dims, i64* out) {
  i64 n = 1;
  for (i64 d : dims)
    if (!mul(n, d, &n) || n > kMaxElements) return false;
  *out = n;
  return true;
}

// Padding and output size of one spatial dimension, overflow-checked
// (docs/contract.md, "Notation"). Returns an empty string or the error.
inline std::string resolve_dim(Padding mode, i64 size, i64 k, i64 stride, i64 dil, i64* pad_lo, i64* pad_hi,
                               i64* out) {
  i64 ek;  // dilated extent (k - 1)*dil + 1
  if (!mul(k - 1, dil, &ek) || !add(ek, 1, &ek)) return "dilations: the dilated filter extent overflows";
  if (mode == Padding::kValid) {
    *pad_lo = *pad_hi = 0;
  } else if (mode == Padding::kSame) {
    const i64 o = size / stride + (size % stride != 0);  // ceil(size / stride): SAME's output size
    i64 t = 0;
    if (o > 0) {
      if (!mul(o - 1, stride, &t) || !add(t, ek, &t)) return "strides: the padded extent overflows";
      t -= size;  // t >= ek - size > -2^63
      if (t < 0) t = 0;
    }
    *pad_lo = t / 2;
    *pad_hi = t - *pad_lo;
    if (o == 0) {  // an empty input stays empty
      *out = 0;
      return std::string();
    }
  }
  i64 span;
  if (!add(size, *pad_lo, &span) || !add(span, *pad_hi, &span)) return "padding: the padded size overflows";
  // A dilated filter larger than the padded input leaves no output (size 0, as tf.nn).
  *out = span < ek ? 0 : (span - ek) / stride + 1;
  return std::string();
}
}  // namespace problem_detail

// Fills padding and output size and validates every field. Returns an empty
// string on success, else a message that names the offending argument. All
// size arithmetic is overflow-checked: a geometry whose sizes do not fit is an
// error, never a wrapped value.
inline std::string finalize_problem(ConvProblem& p, Padding mode) {
  using namespace problem_detail;
  if (p.N < 0 || p.D < 0 || p.H < 0 || p.W < 0 || p.C < 0) return "input: negative dimension";
  if (p.KD <= 0 || p.KH <= 0 || p.KW <= 0 || p.Cg <= 0 || p.Co < 0)
    return "filters: spatial and in-channel dimensions must be positive (got a zero-size filter)";
  if (p.sh < 1 || p.sw < 1 || p.sd < 1) return "strides: must be >= 1";
  if (p.dh < 1 || p.dw < 1 || p.dd < 1) return "dilations: must be >= 1";
  if (p.C % p.Cg != 0)
    return "filters: input channels (" + std::to_string(p.C) + ") must be a multiple of the filter's in-channels (" +
           std::to_string(p.Cg) + ")";
  p.G = p.C / p.Cg;
  if (p.G < 1) return "filters: input channels must be positive";
  if (p.Co % p.G != 0)
    return "filters: out-channels (" + std::to_string(p.Co) + ") must be divisible by the number of groups (" +
           std::to_string(p.G) + ")";
  if (mode == Padding::kExplicit && (p.pt < 0 || p.pb < 0 || p.pl < 0 || p.pr < 0 || p.pf < 0 || p.pk < 0))
    return "padding: explicit padding must be >= 0";
  std::string err;
  if (!(err = resolve_dim(mode, p.D, p.KD, p.sd, p.dd, &p.pf, &p.pk, &p.OD)).empty()) return err;
  if (!(err = resolve_dim(mode, p.H, p.KH, p.sh, p.dh, &p.pt, &p.pb, &p.OH)).empty()) return err;
  if (!(err = resolve_dim(mode, p.W, p.KW, p.sw, p.dw, &p.pl, &p.pr, &p.OW)).empty()) return err;
  i64 n;
  if (!count({p.N, p.D, p.H, p.W, p.C}, &n)) return "input: too many elements";
  if (!count({p.N, p.OD, p.OH, p.OW, p.Co}, &n)) return "output: too many elements (output shape overflows)";
  if (!count({p.KD, p.KH, p.KW, p.Cg, p.Co}, &n)) return "filters: too many elements";
  if (p.dtype != DType::kFloat16 && p.accum == Accum::kFloat16)
    return "accumulation: 'float16' needs float16 inputs";
  return std::string();
}

}  // namespace detconv
