// CPU entry points: pick the ISA path, bring inputs into the accumulator type
// in NHWC (exact conversions; layout never changes a bit), run the kernels.
#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "cpu/cpu_common.h"
#include "cpu/host_isa.h"

namespace detconv {

namespace {

// The paths this build holds: CMakeLists.txt defines both from cmake/cpu_isas.cmake
// (scalar is always built).
#if !defined(DETCONV_BUILT_AVX2) || !defined(DETCONV_BUILT_AVX512)
#error "dispatch.cc needs DETCONV_BUILT_AVX2 and DETCONV_BUILT_AVX512 (CMakeLists.txt sets them)"
#endif

bool built(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return DETCONV_BUILT_AVX512;
    case CpuIsa::kAvx2: return DETCONV_BUILT_AVX2;
    default: return true;
  }
}

// The best path this machine runs (cpu_isa_supported: built, and within the CPU's features).
CpuIsa best_isa() {
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2})
    if (cpu_isa_supported(isa)) return isa;
  return CpuIsa::kScalar;
}

CpuIsa initial_isa() {
  const char* env = std::getenv("DETCONV_CPU_ISA");
  if (env) {
    CpuIsa want = CpuIsa::kAuto;
    if (!std::strcmp(env, "scalar")) want = CpuIsa::kScalar;
    if (!std::strcmp(env, "avx2")) want = CpuIsa::kAvx2;
    if (!std::strcmp(env, "avx512")) want = CpuIsa::kAvx512;
    if (want != CpuIsa::kAuto && cpu_isa_supported(want)) return want;
  }
  return best_isa();
}

std::atomic<int>& active_isa() {
  static std::atomic<int> isa{static_cast<int>(initial_isa())};
  return isa;
}

const cpu::IsaTable& table_for(CpuIsa isa) {
  // Each table is built only when its ISA runs here (building one executes its code).
  switch (isa) {
#if DETCONV_BUILT_AVX512
    case CpuIsa::kAvx512: { static const cpu::IsaTable t = cpu::isa_table_avx512(); return t; }
#endif
#if DETCONV_BUILT_AVX2
    case CpuIsa::kAvx2: { static const cpu::IsaTable t = cpu::isa_table_avx2(); return t; }
#endif
    default: { static const cpu::IsaTable t = cpu::isa_table_scalar(); return t; }
  }
}

const cpu::IsaTable& table() { return table_for(cpu_isa_active()); }

// Calls fn(convert) with a per-element converter for the source dtype, so the
// dtype switch happens once per tensor, not once per element.
template <class A, class Fn>
void with_source(const void* src, DType dt, Fn&& fn) {
  switch (dt) {
    case DType::kFloat32: { auto s = static_cast<const float*>(src); fn([s](i64 k) { return A(s[k]); }); break; }
    case DType::kFloat64: { auto s = static_cast<const double*>(src); fn([s](i64 k) { return A(s[k]); }); break; }
    case DType::kFloat16: {
      auto s = static_cast<const std::uint16_t*>(src);
      fn([s](i64 k) { return A(half_to_float(s[k])); });
      break;
    }
    case DType::kBFloat16: {
      auto s = static_cast<const std::uint16_t*>(src);
      fn([s](i64 k) { return A(bf16_to_float(s[k])); });
      break;
    }
  }
}

// Writes an input-shaped or output-shaped tensor to dst as NHWC accumulator
// values, in parallel over rows (each thread first-touches its own rows).
// Conversions to the accumulator are exact.
template <class A>
void to_nhwc(const void* src, DType dt, Layout layout, i64 N, i64 H, i64 W, i64 C, A* out, const CpuExecutor& ex) {
  const Strides4 s = make_strides(layout, H, W, C);
  with_source<A>(src, dt, [&](auto load) {
    ex.parallel_for(N * H, W * C, [&](i64 r0, i64 r1) {
      cpu::FpEnvGuard guard;  // conversions of subnormals must not meet DAZ
      for (i64 r = r0; r < r1; ++r) {
        const i64 n = r / H, h = r % H;
        A* dst = out + r * W * C;
        if (layout == Layout::kNHWC) {
          const i64 base = s.at(n, h, 0, 0);
          if constexpr (std::is_same<A, float>::value) {
            if (dt == DType::kFloat16) {  // the common 16-bit case, vectorized per ISA
              table().half_to_float(static_cast<const std::uint16_t*>(src) + base, dst, W * C);
              continue;
            }
          }
          for (i64 k = 0; k < W * C; ++k) dst[k] = load(base + k);
        } else {
          for (i64 c = 0; c < C; ++c) {
            const i64 base = s.at(n, h, 0, c);
            for (i64 w = 0; w < W; ++w) dst[w * C + c] = load(base + w);
          }
        }
      }
    });
  });
}

// x or dy as Rows of accumulator values: read in place when it already is
// NHWC in the accumulator type (only its last row is copied, padded), else
// converted whole into a workspace (kPad zeros after it).
template <class A>
struct RowsBuf {
  cpu::Workspace<A> own;
  cpu::Rows<A> rows;
};

// NHWC values of type S read in place: only the last row is copied, padded.
template <class S>
RowsBuf<S> rows_in_place(const S* base, i64 nrows, i64 len, const CpuExecutor& ex) {
  RowsBuf<S> rb;
  rb.own = cpu::Workspace<S>(ex, len);
  if (nrows > 0) std::memcpy(rb.own.data(), base + (nrows - 1) * len, len * sizeof(S));
  else std::fill(rb.own.data(), rb.own.data() + len, S{});
  rb.rows = cpu::Rows<S>{base, len, nrows - 1, rb.own.data()};
  return rb;
}

template <class A>
RowsBuf<A> make_rows(const void* src, DType dt, Layout layout, i64 N, i64 H, i64 W, i64 C, const CpuExecutor& ex) {
  RowsBuf<A> rb;
  const i64 nrows = N * H, len = W * C;
  const bool in_place = layout == Layout::kNHWC && dt == (sizeof(A) == 8 ? DType::kFloat64 : DType::kFloat32);
  if (in_place) {
    rb = rows_in_place(static_cast<const A*>(src), nrows, len, ex);
  } else {
    rb.own = cpu::Workspace<A>(ex, nrows * len);
    to_nhwc<A>(src, dt, layout, N, H, W, C, rb.own.data(), ex);
    rb.rows = cpu::Rows<A>{rb.own.data(), len, nrows - 1, rb.own.data() + (nrows > 0 ? nrows - 1 : 0) * len};
  }
  return rb;
}

// A filter or bias as accumulator values: the caller's memory itself when it
// already holds them (kernels read filters and biases only in bounds, while
// packing), else an exact conversion into a workspace: not zero-filled, and
// TensorFlow's allocator reuses its pages. A std::vector's fill of a 3x3
// 512->512 float16 filter's 9.4 MB on every call held that layer's 16-bit
// forward pass and input gradient at 0.86-0.89 of our float32 speed (now
// 0.92-0.96; 1x1 7x7 2048->512 0.86-0.92 -> 0.96-0.99).
template <class A>
struct AccValues {
  cpu::Workspace<A> own;
  const A* data = nullptr;
};

template <class A>
AccValues<A> to_acc(const void* src, DType dt, i64 count, const CpuExecutor& ex) {
  AccValues<A> v;
  if (dt == (sizeof(A) == 8 ? DType::kFloat64 : DType::kFloat32)) {
    v.data = static_cast<const A*>(src);
    return v;
  }
  v.own = cpu::Workspace<A>(ex, count);
  // In parallel blocks (a 3x3x512x512 filter is 2.4M values): F16C for float16.
  constexpr i64 kBlock = 16384;
  with_source<A>(src, dt, [&](auto load) {
    ex.parallel_for(ceil_div(count, kBlock), kBlock, [&](i64 b0, i64 b1) {
      cpu::FpEnvGuard guard;  // conversions of subnormals must not meet DAZ
      const i64 k0 = b0 * kBlock, k1 = std::min(count, b1 * kBlock);
      if constexpr (std::is_same<A, float>::value) {
        if (dt == DType::kFloat16) {
          table().half_to_float(static_cast<const std::uint16_t*>(src) + k0, v.own.data() + k0, k1 - k0);
          return;
        }
      }
      for (i64 k = k0; k < k1; ++k) v.own.data()[k] = load(k);
    });
  });
  v.data = v.own.data();
  return v;
}

// A 3-D problem runs on the 2-D kernels ("depth as rows" below).
bool three_d(const ConvProblem& p) { return p.D != 1 || p.KD != 1; }

// Whether the kernels read this problem's float16 x and dy in place (2-D NHWC
// only: 3-D rows are a pointer table over converted rows); accepts: the ISA's
// fprop_takes_half, dgrad_takes_half or wgrad_takes_half.
bool half_direct(const ConvProblem& p, bool (*accepts)(const ConvProblem&)) {
  return p.dtype == DType::kFloat16 && p.layout == Layout::kNHWC && !three_d(p) && accepts && accepts(p);
}

// Calls fn with the accumulator type and kernel set of the problem.
template <class Fn>
void with_kernels(const ConvProblem& p, Fn&& fn) {
  const cpu::IsaTable& t = table();
  if (p.dtype == DType::kFloat64) fn(double(0), t.f64);
  else if (p.accum == Accum::kFloat16) fn(float(0), t.h16);
  else fn(float(0), t.f32);
}

// ---------------------------------------------------------------- depth as rows
// A 3-D problem's forward pass, filter and bias gradients run on the 2-D
// kernels as a taller 2-D problem, bit for bit: image n2 = n*OD + od, whose
// row oh*KD*KH + kd*KH + kh is the input row (n, od*sd + kd*dd - pf,
// oh*sh + kh*dh - pt) or, in padding, a row of +0; filter height KD*KH, row
// stride KD*KH, no row padding. Its fold over (kh2 = kd*KH + kh, kw, i) is
// order.h's (kd, kh, kw, i), its r = (n2*OH + oh)*OW + ow is order.h's r (so
// the chunks are the same), and its filter [KD*KH, KW, Cg, Co] is the 3-D
// filter's memory. The rows are a table of pointers, not copies.

ConvProblem depth_as_rows(const ConvProblem& p, i64 images) {
  ConvProblem q = p;
  q.N = images * p.OD;
  q.KH = p.KD * p.KH;
  q.H = p.OH * q.KH;
  q.sh = q.KH;
  q.dh = 1;
  q.pt = q.pb = 0;
  q.D = q.KD = q.OD = 1;
  q.sd = q.dd = 1;
  q.pf = q.pk = 0;
  return q;
}

template <class A>
struct TallRows {
  std::vector<const A*> table;
  std::vector<A> zeros;
  cpu::Rows<A> rows;
};

// The taller problem's rows for images [n0, n0 + images); x holds rows (n*D + id)*H + ih.
template <class A>
TallRows<A> tall_rows(const ConvProblem& p, const cpu::Rows<A>& x, i64 n0, i64 images) {
  TallRows<A> t;
  t.zeros.assign(p.W * p.C + cpu::kPad, A(0));
  t.table.reserve(images * p.OD * p.OH * p.KD * p.KH);
  for (i64 n = n0; n < n0 + images; ++n)
    for (i64 od = 0; od < p.OD; ++od)
      for (i64 oh = 0; oh < p.OH; ++oh)
        for (i64 kd = 0; kd < p.KD; ++kd)
          for (i64 kh = 0; kh < p.KH; ++kh) {
            const i64 id = fprop_in_dep(p, od, kd), ih = fprop_in_row(p, oh, kh);
            const bool inside = id >= 0 && id < p.D && ih >= 0 && ih < p.H;
            t.table.push_back(inside ? x.row((n * p.D + id) * p.H + ih) : t.zeros.data());
          }
  t.rows = cpu::Rows<A>{nullptr, p.W * p.C, -1, nullptr, t.table.data(), t.zeros.data()};
  return t;
}

}  // namespace

bool cpu_isa_supported(CpuIsa isa) {
  if (isa == CpuIsa::kAuto || isa == CpuIsa::kScalar) return true;
  return built(isa) && static_cast<int>(isa) <= static_cast<int>(host_best_isa());
}

bool cpu_isa_force(CpuIsa isa) {
  if (isa == CpuIsa::kAuto) isa = best_isa();
  if (!cpu_isa_supported(isa)) return false;
  active_isa().store(static_cast<int>(isa));
  return true;
}

CpuIsa cpu_isa_active() { return static_cast<CpuIsa>(active_isa().load()); }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    default: return "auto";
  }
}

double cpu_fma_peak_gflops(int threads) {
  if (threads < 1) threads = 1;
  const auto probe = table().f32.fma_probe;
  const i64 iters = i64(1) << 24;
  probe(iters / 16);  // warm up the clocks
  std::vector<double> flops(threads, 0.0);
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { flops[t] = probe(iters); });
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total = 0;
  for (double f : flops) total += f;
  return total / secs / 1e9;
}

// x and dy are read as 2-D (height D*H, OD*OH): the same rows for either layout.
void fprop_cpu(const ConvProblem& p, const void* x, const void* f, const void* bias, void* y, const CpuExecutor& ex) {
  if (p.y_elems() == 0) return;
  with_kernels(p, [&](auto zero, const auto& k) {
    using A = decltype(zero);
    const auto fa = to_acc<A>(f, p.dtype, p.filter_elems(), ex);
    AccValues<A> ba;
    if (bias) ba = to_acc<A>(bias, p.dtype, p.Co, ex);
    const A* b = bias ? ba.data : nullptr;
    if (half_direct(p, k.fprop_takes_half)) {
      const auto xh = rows_in_place(static_cast<const cpu::Half16*>(x), p.N * p.H, p.W * p.C, ex);
      k.fprop_half(p, xh.rows, fa.data, b, cpu::OutSpec{y, p.dtype, p.y_strides()}, ex);
      return;
    }
    const auto xa = make_rows<A>(x, p.dtype, p.layout, p.N, p.D * p.H, p.W, p.C, ex);
    if (!three_d(p)) {
      k.fprop(p, xa.rows, fa.data, b, cpu::OutSpec{y, p.dtype, p.y_strides()}, ex);
      return;
    }
    // Output image n2 = n*OD + od is at n2*s.d in NDHWC (one call); in NCDHW
    // only within one n (one call per image).
    const Strides4 ys = p.y_strides();
    const i64 step = p.layout == Layout::kNCHW ? 1 : p.N;
    for (i64 n0 = 0; n0 < p.N; n0 += step) {
      const TallRows<A> t = tall_rows(p, xa.rows, n0, step);
      void* base = static_cast<char*>(y) + n0 * ys.n * dtype_size(p.dtype);
      k.fprop(depth_as_rows(p, step), t.rows, fa.data, b, cpu::OutSpec{base, p.dtype, Strides4{ys.d, ys.h, ys.w, ys.c}},
              ex);
    }
  });
}

void dgrad_cpu(const ConvProblem& p, const void* dy, const void* f, void* dx, const CpuExecutor& ex) {
  if (p.x_elems() == 0) return;
  with_kernels(p, [&](auto zero, const auto& k) {
    using A = decltype(zero);
    const auto fa = to_acc<A>(f, p.dtype, p.filter_elems(), ex);
    if (half_direct(p, k.dgrad_takes_half)) {
      const auto dh = rows_in_place(static_cast<const cpu::Half16*>(dy), p.N * p.OH, p.OW * p.Co, ex);
      k.dgrad_half(p, dh.rows, fa.data, cpu::OutSpec{dx, p.dtype, p.x_strides()}, ex);
      return;
    }
    const auto da = make_rows<A>(dy, p.dtype, p.layout, p.N, p.OD * p.OH, p.OW, p.Co, ex);
    k.dgrad(p, da.rows, fa.data, cpu::OutSpec{dx, p.dtype, p.x_strides()}, ex);  // depth-aware (dgrad_impl.h)
  });
}

void wgrad_cpu(const ConvProblem& p, const void* x, const void* dy, void* dw, const CpuExecutor& ex) {
  if (p.filter_elems() == 0) return;
  with_kernels(p, [&](auto zero, const auto& k) {
    using A = decltype(zero);
    const cpu::OutSpec out{dw, p.dtype, Strides4{0, 0, 0, 1}};
    if (half_direct(p, k.wgrad_takes_half)) {
      const auto xh = rows_in_place(static_cast<const cpu::Half16*>(x), p.N * p.H, p.W * p.C, ex);
      const auto dh = rows_in_place(static_cast<const cpu::Half16*>(dy), p.N * p.OH, p.OW * p.Co, ex);
      k.wgrad_half(p, xh.rows, dh.rows, out, ex);
      return;
    }
    const auto xa = make_rows<A>(x, p.dtype, p.layout, p.N, p.D * p.H, p.W, p.C, ex);
    const auto da = make_rows<A>(dy, p.dtype, p.layout, p.N, p.OD * p.OH, p.OW, p.Co, ex);
    if (!three_d(p)) {
      k.wgrad(p, xa.rows, da.rows, out, ex);
      return;
    }
    const TallRows<A> t = tall_rows(p, xa.rows, 0, p.N);
    k.wgrad(depth_as_rows(p, p.N), t.rows, da.rows, out, ex);
  });
}

void bgrad_cpu(const ConvProblem& p, const void* dy, void* db, const CpuExecutor& ex) {
  if (p.Co == 0) return;
  with_kernels(p, [&](auto zero, const auto& k) {
    using A = decltype(zero);
    const auto da = make_rows<A>(dy, p.dtype, p.layout, p.N, p.OD * p.OH, p.OW, p.Co, ex);
    ConvProblem q = p;  // r = ((n*OD + od)*OH + oh)*OW + ow: depth joins the rows
    q.OH = p.OD * p.OH;
    q.OD = 1;
    k.bgrad(q, da.rows, cpu::OutSpec{db, p.dtype, Strides4{0, 0, 0, 1}}, ex);
  });
}

}  // namespace detconv
