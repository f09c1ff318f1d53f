// Runs the CUDA kernels of cuda/ under the host emulator (cuda_emu.h) and
// compares every output bit with a direct transcription of the contract's
// loop nests (the templates of detconv/order.h, one output at a time).
//
// This checks the kernels' tiling, staging, group packing, dgrad phases,
// wgrad chunk parts and their combination on a machine without a GPU. It does
// not check the device's arithmetic (tests/gpu/ does that on real hardware).
//
//   usage: emu_test [cases=200] [seed=1]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "detconv/kernels.h"
#include "detconv/numerics.h"
#include "detconv/order.h"
#include "detconv/problem.h"

using namespace detconv;

namespace {

// ---------------------------------------------------------- oracle numerics
struct HF32 {
  using T = float; using A = float;
  static A load(T v) { return v; }
  static A fma(A a, A b, A c) { return std::fmaf(a, b, c); }
  static A add(A a, A b) { return a + b; }
  static T store(A a) { return canon32(a); }
  static T from_double(double d) { return float(d); }
};
struct HF64 {
  using T = double; using A = double;
  static A load(T v) { return v; }
  static A fma(A a, A b, A c) { return std::fma(a, b, c); }
  static A add(A a, A b) { return a + b; }
  static T store(A a) { return canon64(a); }
  static T from_double(double d) { return d; }
};
struct HF16A32 {
  using T = std::uint16_t; using A = float;
  static A load(T v) { return half_to_float(v); }
  static A fma(A a, A b, A c) { return std::fmaf(a, b, c); }
  static A add(A a, A b) { return a + b; }
  static T store(A a) { return float_to_half(a); }
  static T from_double(double d) { return float_to_half(float(d)); }
};
struct HF16A16 {  // binary16 values held in float, exact binary16 fma/add
  using T = std::uint16_t; using A = float;
  static A load(T v) { return half_to_float(v); }
  static A fma(A a, A b, A c) { return fma_h16(a, b, c); }
  static A add(A a, A b) { return add_h16(a, b); }
  static T store(A a) { return float_to_half(a); }
  static T from_double(double d) { return float_to_half(float(d)); }
};
struct HBF16 {
  using T = std::uint16_t; using A = float;
  static A load(T v) { return bf16_to_float(v); }
  static A fma(A a, A b, A c) { return std::fmaf(a, b, c); }
  static A add(A a, A b) { return a + b; }
  static T store(A a) { return float_to_bf16(a); }
  static T from_double(double d) { return float_to_bf16(float(d)); }
};

template <class H>
struct Oracle {
  using T = typename H::T;
  using A = typename H::A;
  static void fprop(const ConvProblem& p, const T* x, const T* f, const T* b, T* y) {
    const Strides4 xs = p.x_strides(), ys = p.y_strides();
    auto x_at = [&](i64 n, i64 d, i64 h, i64 w, i64 c) { return H::load(x[xs.at5(n, d, h, w, c)]); };
    auto f_at = [&](i64 kd, i64 kh, i64 kw, i64 i, i64 o) { return H::load(f[p.f_at5(kd, kh, kw, i, o)]); };
    for (i64 n = 0; n < p.N; ++n)
      for (i64 od = 0; od < p.OD; ++od)
        for (i64 oh = 0; oh < p.OH; ++oh)
          for (i64 ow = 0; ow < p.OW; ++ow)
            for (i64 o = 0; o < p.Co; ++o) {
              A acc = fprop_fold<A>(p, n, od, oh, ow, o, x_at, f_at, H::fma);
              if (b) acc = H::add(acc, H::load(b[o]));
              y[ys.at5(n, od, oh, ow, o)] = H::store(acc);
            }
  }
  static void dgrad(const ConvProblem& p, const T* dy, const T* f, T* dx) {
    const Strides4 xs = p.x_strides(), ys = p.y_strides();
    auto dy_at = [&](i64 n, i64 d, i64 h, i64 w, i64 o) { return H::load(dy[ys.at5(n, d, h, w, o)]); };
    auto f_at = [&](i64 kd, i64 kh, i64 kw, i64 i, i64 o) { return H::load(f[p.f_at5(kd, kh, kw, i, o)]); };
    for (i64 n = 0; n < p.N; ++n)
      for (i64 id = 0; id < p.D; ++id)
        for (i64 ih = 0; ih < p.H; ++ih)
          for (i64 iw = 0; iw < p.W; ++iw)
            for (i64 c = 0; c < p.C; ++c)
              dx[xs.at5(n, id, ih, iw, c)] = H::store(dgrad_fold<A>(p, n, id, ih, iw, c, dy_at, f_at, H::fma));
  }
  static void wgrad(const ConvProblem& p, const T* x, const T* dy, T* dw) {
    const Strides4 xs = p.x_strides(), ys = p.y_strides();
    auto x_at = [&](i64 n, i64 d, i64 h, i64 w, i64 c) { return H::load(x[xs.at5(n, d, h, w, c)]); };
    auto dy_at = [&](i64 n, i64 d, i64 h, i64 w, i64 o) { return H::load(dy[ys.at5(n, d, h, w, o)]); };
    const Chunks ch = reduction_chunks(p.R(), p.filter_elems());
    std::vector<A> parts(std::size_t(ch.P > 0 ? ch.P : 1));
    for (i64 kd = 0; kd < p.KD; ++kd)
      for (i64 kh = 0; kh < p.KH; ++kh)
        for (i64 kw = 0; kw < p.KW; ++kw)
          for (i64 i = 0; i < p.Cg; ++i)
            for (i64 o = 0; o < p.Co; ++o) {
              for (i64 k = 0; k < ch.P; ++k)
                parts[k] = wgrad_chunk_fold<A>(p, ch, k, kd, kh, kw, i, o, x_at, dy_at, H::fma);
              dw[p.f_at5(kd, kh, kw, i, o)] =
                  H::store(combine_parts<A>(ch, [&](i64 k) { return parts[k]; }, H::add));
            }
  }
  static void bgrad(const ConvProblem& p, const T* dy, T* db) {
    const Strides4 ys = p.y_strides();
    auto dy_at = [&](i64 n, i64 d, i64 h, i64 w, i64 o) { return H::load(dy[ys.at5(n, d, h, w, o)]); };
    const Chunks ch = reduction_chunks(p.R(), p.Co);
    std::vector<A> parts(std::size_t(ch.P > 0 ? ch.P : 1));
    for (i64 o = 0; o < p.Co; ++o) {
      for (i64 k = 0; k < ch.P; ++k) parts[k] = bgrad_chunk_fold<A>(p, ch, k, o, dy_at, H::add);
      db[o] = H::store(combine_parts<A>(ch, [&](i64 k) { return parts[k]; }, H::add));
    }
  }
};

std::mt19937_64 rng;
i64 pick(i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(rng); }

// Random non-integer data with a sprinkle of specials (zeros of both signs,
// subnormals, infinities, NaNs) so the NaN canonicalisation is exercised.
template <class H>
std::vector<typename H::T> data(i64 n, double scale, bool specials) {
  std::vector<typename H::T> v(std::size_t(n > 0 ? n : 0));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& e : v) {
    double d = u(rng) * scale;
    if (specials) {
      const int s = int(pick(0, 400));
      if (s == 0) d = std::nan("");
      else if (s == 1) d = INFINITY;
      else if (s == 2) d = -0.0;
      else if (s == 3) d = 1e-42 * u(rng);  // float32 subnormal; flushes to 0 or subnormal in 16-bit
      else if (s == 4) d = 3e-6 * u(rng);   // binary16 subnormal range
    }
    e = H::from_double(d);
  }
  return v;
}

template <class V>
bool same_bits(const V& a, const V& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

bool g_misaligned = false;  // operands start one element past an aligned address (scalar loads)

// A copy of v starting `off` elements into fresh storage (kept alive in `keep`).
template <class T>
T* placed(const std::vector<T>& v, int off, std::vector<std::vector<T>>& keep) {
  keep.emplace_back(v.size() + 1 + off);
  std::copy(v.begin(), v.end(), keep.back().begin() + off);
  return keep.back().data() + off;
}

std::string describe(const ConvProblem& p) {
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "N=%ld D=%ld H=%ld W=%ld C=%ld K=%ldx%ldx%ld Cg=%ld Co=%ld G=%ld s=%ld,%ld,%ld d=%ld,%ld,%ld "
                "pad=%ld,%ld,%ld,%ld,%ld,%ld OD=%ld OH=%ld OW=%ld %s %s%s%s",
                long(p.N), long(p.D), long(p.H), long(p.W), long(p.C), long(p.KD), long(p.KH), long(p.KW),
                long(p.Cg), long(p.Co), long(p.G), long(p.sd), long(p.sh), long(p.sw), long(p.dd), long(p.dh),
                long(p.dw), long(p.pf), long(p.pk), long(p.pt), long(p.pb), long(p.pl), long(p.pr), long(p.OD),
                long(p.OH), long(p.OW), p.layout == Layout::kNHWC ? "NHWC" : "NCHW", dtype_name(p.dtype),
                p.accum == Accum::kFloat16 ? " acc16" : "", g_misaligned ? " misaligned" : "");
  return buf;
}

template <class H>
int run_case(const ConvProblem& p, bool specials) {
  using T = typename H::T;
  const double scale = p.accum == Accum::kFloat16 ? 0.5 : 1.5;
  auto x = data<H>(p.x_elems(), scale, specials);
  auto f = data<H>(p.filter_elems(), scale, specials);
  auto b = data<H>(p.Co, scale, specials);
  auto dy = data<H>(p.y_elems(), scale, specials);
  std::vector<std::vector<T>> keep;
  const int off = g_misaligned ? 1 : 0;
  const T* xp = placed(x, off, keep);
  const T* fp = placed(f, off, keep);
  const T* dyp = placed(dy, off, keep);
  int bad = 0;
  const bool with_bias = pick(0, 1) == 1;
  {
    std::vector<T> want(std::size_t(p.y_elems())), got(want.size());
    Oracle<H>::fprop(p, x.data(), f.data(), with_bias ? b.data() : nullptr, want.data());
    const char* err = fprop_gpu(p, xp, fp, with_bias ? b.data() : nullptr, got.data(), nullptr);
    if (err) { std::printf("fprop error: %s\n", err); ++bad; }
    else if (!same_bits(want, got)) { std::printf("FPROP MISMATCH %s\n", describe(p).c_str()); ++bad; }
  }
  {
    std::vector<T> want(std::size_t(p.x_elems())), got(want.size());
    Oracle<H>::dgrad(p, dy.data(), f.data(), want.data());
    const char* err = dgrad_gpu(p, dyp, fp, got.data(), nullptr);
    if (err) { std::printf("dgrad error: %s\n", err); ++bad; }
    else if (!same_bits(want, got)) { std::printf("DGRAD MISMATCH %s\n", describe(p).c_str()); ++bad; }
  }
  {
    std::vector<T> want(std::size_t(p.filter_elems())), got(want.size());
    std::vector<unsigned char> ws(wgrad_gpu_workspace_bytes(p) + 1);
    Oracle<H>::wgrad(p, x.data(), dy.data(), want.data());
    const char* err = wgrad_gpu(p, xp, dyp, got.data(), ws.data(), nullptr);
    if (err) { std::printf("wgrad error: %s\n", err); ++bad; }
    else if (!same_bits(want, got)) { std::printf("WGRAD MISMATCH %s\n", describe(p).c_str()); ++bad; }
  }
  {
    std::vector<T> want(std::size_t(p.Co)), got(want.size());
    std::vector<unsigned char> ws(bgrad_gpu_workspace_bytes(p) + 1);
    Oracle<H>::bgrad(p, dy.data(), want.data());
    const char* err = bgrad_gpu(p, dyp, got.data(), ws.data(), nullptr);
    if (err) { std::printf("bgrad error: %s\n", err); ++bad; }
    else if (!same_bits(want, got)) { std::printf("BGRAD MISMATCH %s\n", describe(p).c_str()); ++bad; }
  }
  return bad;
}

int run(const ConvProblem& p, bool specials) {
  switch (p.dtype) {
    case DType::kFloat32: return run_case<HF32>(p, specials);
    case DType::kFloat64: return run_case<HF64>(p, specials);
    case DType::kFloat16: return p.accum == Accum::kFloat16 ? run_case<HF16A16>(p, specials) : run_case<HF16A32>(p, specials);
    case DType::kBFloat16: return run_case<HBF16>(p, specials);
  }
  return 1;
}

// Problem kinds, cycled through by main().
constexpr int kKinds = 8;

// A random problem of one kind (every kind mixes dtypes, both float16
// accumulations, layouts and the three padding modes).
bool random_problem(ConvProblem& p, int shape_kind) {
  p = ConvProblem();
  p.N = pick(1, 3);
  p.KH = pick(1, 3);
  p.KW = pick(1, 3);
  p.sh = pick(1, 3);
  p.sw = pick(1, 3);
  p.dh = pick(1, 2);
  p.dw = pick(1, 2);
  p.H = pick(1, 10);
  p.W = pick(1, 10);
  i64 G, Cog;
  switch (shape_kind) {
    case 0:  // small groups of everything
      G = pick(1, 3); p.Cg = pick(1, 4); Cog = pick(1, 5); break;
    case 1:  // depthwise, depth multiplier 1..3
      G = pick(1, 24); p.Cg = 1; Cog = pick(1, 3); break;
    case 2:  // wide: several column tiles, K tails, reduction chunks
      G = pick(1, 2); p.Cg = pick(15, 40); Cog = pick(60, 140); p.H = pick(1, 6); p.W = pick(1, 6);
      p.KH = pick(1, 2); p.KW = pick(1, 2); break;
    case 3:  // many pixels, few channels (many row tiles and wgrad chunks)
      G = 1; p.Cg = pick(1, 3); Cog = pick(1, 4); p.N = pick(1, 4); p.H = pick(8, 24); p.W = pick(8, 24); break;
    case 4:  // three spatial dimensions
      G = pick(1, 2); p.Cg = pick(1, 9); Cog = pick(1, 12); p.D = pick(1, 6); p.KD = pick(1, 3); p.sd = pick(1, 2);
      p.dd = pick(1, 2); p.H = pick(1, 6); p.W = pick(1, 6); break;
    case 5:  // vector quads: channel counts that are multiples of 4, GEMM tiles with tails
      G = pick(1, 2); p.Cg = 4 * pick(1, 10); Cog = 4 * pick(2, 36); p.H = pick(2, 9); p.W = pick(2, 9); break;
    case 6:  // stem-like: 3 input channels, wide filters, stride 2
      G = 1; p.Cg = 3; Cog = pick(8, 40); p.KH = pick(3, 7); p.KW = pick(3, 7); p.sh = p.sw = 2; p.dh = p.dw = 1;
      p.H = pick(6, 16); p.W = pick(6, 16); break;
    default:  // 3-D with GEMM-sized channels
      G = 1; p.Cg = 4 * pick(1, 6); Cog = 4 * pick(2, 20); p.D = pick(2, 5); p.KD = pick(1, 3); p.sd = pick(1, 2);
      p.H = pick(2, 6); p.W = pick(2, 6); p.KH = pick(1, 3); p.KW = pick(1, 3); break;
  }
  p.C = G * p.Cg;
  p.Co = G * Cog;
  const int dt = int(pick(0, 4));
  p.dtype = dt == 0 ? DType::kFloat32 : dt == 1 ? DType::kFloat64 : dt == 4 ? DType::kBFloat16 : DType::kFloat16;
  p.accum = dt == 3 ? Accum::kFloat16 : Accum::kDefault;
  p.layout = pick(0, 3) == 0 ? Layout::kNCHW : Layout::kNHWC;
  Padding mode = Padding(pick(0, 2));
  if (mode == Padding::kExplicit) {
    p.pt = pick(0, 3); p.pb = pick(0, 3); p.pl = pick(0, 3); p.pr = pick(0, 3);
    if (p.D > 1 || p.KD > 1) { p.pf = pick(0, 2); p.pk = pick(0, 2); }
  }
  return finalize_problem(p, mode).empty();
}

}  // namespace

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 200;
  rng.seed(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1);
  int bad = 0, done = 0;
  // A few fixed edge cases first: empty batch, 1x1 everything, kernel larger than the stride grid.
  {
    ConvProblem p;
    p.N = 0; p.H = 3; p.W = 3; p.C = 2; p.KH = 2; p.KW = 2; p.Cg = 2; p.Co = 3;
    finalize_problem(p, Padding::kSame);
    bad += run(p, false); ++done;
    ConvProblem q;
    q.N = 1; q.H = 1; q.W = 1; q.C = 1; q.KH = 1; q.KW = 1; q.Cg = 1; q.Co = 1;
    finalize_problem(q, Padding::kValid);
    bad += run(q, false); ++done;
    ConvProblem r;
    r.N = 2; r.H = 7; r.W = 5; r.C = 3; r.KH = 2; r.KW = 2; r.Cg = 3; r.Co = 2; r.sh = 4; r.sw = 3;
    finalize_problem(r, Padding::kValid);
    bad += run(r, true); ++done;
    // empty outputs: no output channel; a filter wider than the VALID input (dx is +0 everywhere)
    for (int layout = 0; layout < 2; ++layout) {
      ConvProblem e;
      e.N = 2; e.H = 4; e.W = 3; e.C = 6; e.KH = 2; e.KW = 2; e.Cg = 3; e.Co = 0; e.layout = Layout(layout);
      if (!finalize_problem(e, Padding::kSame).empty()) { std::printf("edge case rejected\n"); ++bad; }
      bad += run(e, true); ++done;
      ConvProblem w;
      w.N = 2; w.H = 4; w.W = 2; w.C = 4; w.KH = 1; w.KW = 5; w.Cg = 4; w.Co = 8; w.layout = Layout(layout);
      if (!finalize_problem(w, Padding::kValid).empty() || w.OW != 0) { std::printf("edge case OW\n"); ++bad; }
      bad += run(w, true); ++done;
    }
  }
  // bias gradient of an output-shaped-only problem, as the TensorFlow op builds it
  for (int layout = 0; layout < 2; ++layout) {
    ConvProblem full;
    full.N = 3; full.H = 9; full.W = 7; full.C = 5; full.KH = 1; full.KW = 1; full.Cg = 5; full.Co = 5;
    full.layout = Layout(layout);
    finalize_problem(full, Padding::kValid);
    ConvProblem bare;
    bare.N = full.N; bare.OH = full.OH; bare.OW = full.OW; bare.Co = full.Co; bare.layout = full.layout;
    auto dy = data<HF32>(full.y_elems(), 1.0, false);
    std::vector<float> want(5), got(5);
    Oracle<HF32>::bgrad(full, dy.data(), want.data());
    std::vector<unsigned char> ws(bgrad_gpu_workspace_bytes(bare) + 1);
    const char* err = bgrad_gpu(bare, dy.data(), got.data(), ws.data(), nullptr);
    if (err || !same_bits(want, got)) { std::printf("BGRAD (bare problem) MISMATCH %s\n", err ? err : ""); ++bad; }
    ++done;
  }
  // 18 chunks of a small filter: the combine's kernels (forced in turn by DETCONV_CUDA_TILE)
  // over unrolled batches of parts and a remainder, and past one staged batch of the 8-wide blocks.
  for (int layout = 0; layout < 2; ++layout) {
    ConvProblem many;
    many.N = 2; many.H = 24; many.W = 24; many.C = 2; many.KH = 3; many.KW = 3; many.Cg = 2; many.Co = 3;
    many.layout = Layout(layout);
    finalize_problem(many, Padding::kSame);
    if (reduction_chunks(many.R(), many.filter_elems()).P != 18) { std::printf("many-chunks case: P\n"); ++bad; }
    bad += run(many, false); ++done;
  }
  for (int k = 0; k < cases; ++k) {
    ConvProblem p;
    if (!random_problem(p, k % kKinds)) continue;
    g_misaligned = pick(0, 4) == 0;
    bad += run(p, k % 3 == 0);
    g_misaligned = false;
    ++done;
  }
  std::printf("emu_test: %d problems x 4 computations, %d mismatches, %ld barriers emulated\n", done, bad,
              emu::sched().barriers);
  return bad == 0 ? 0 : 1;
}
