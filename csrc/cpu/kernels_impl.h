// The CPU kernels, written once over a vector type V (simd_*.h) and compiled
// once per ISA inside its own namespace. Every kernel vectorizes across
// outputs (output channels, input channels, or dw elements) and blocks several
// output pixels / taps in registers; each lane folds exactly one output in the
// order of detconv/order.h, so ISA, block shape and threads never change bits.
//
// Inputs arrive canonicalized by dispatch.cc: x and dy NHWC, f HWIO, all in
// the accumulator type, each readable kPad elements past its end.

template <class V>
struct Kernels {
  using T = typename V::T;
  using R = typename V::R;
  static constexpr int L = V::L, PW = V::kPW, NV = V::kNV, BW = L * NV;
  static constexpr int TI = V::kTI;  // input channels per dense dw register tile

  // Writes lanes [0, n) of a vector block to out.put(base + lane*stride).
  // v by value: taking an accumulator's address would pin it to memory and spill in the hot loop.
  static void put_lanes(const OutSpec& out, R v, i64 base, i64 stride, i64 n) {
    if (stride == 1 && out.dtype == (sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32)) {
      T* dst = static_cast<T*>(out.base) + base;  // common case: no dtype switch per element
      if (n >= L) {
        V::store(dst, V::canon(v));
      } else {
        alignas(64) T tmp[L];
        V::store(tmp, V::canon(v));
        for (i64 l = 0; l < n; ++l) dst[l] = tmp[l];
      }
      return;
    }
    if constexpr (sizeof(T) == 4) {
      if (out.dtype == DType::kFloat16 || out.dtype == DType::kBFloat16) {  // 16-bit outputs: vector rounding
        std::uint16_t* dst = static_cast<std::uint16_t*>(out.base) + base;
        alignas(64) std::uint16_t h[L];
        std::uint16_t* to = stride == 1 && n >= L ? dst : h;  // whole vectors straight out, else scattered
        if (out.dtype == DType::kFloat16) V::store_half(to, v);
        else V::store_bf16(to, v);
        if (to == h)
          for (i64 l = 0; l < n && l < L; ++l) dst[l * stride] = h[l];
        return;
      }
    }
    alignas(64) T tmp[L];
    V::store(tmp, v);
    for (i64 l = 0; l < n && l < L; ++l) out.put(base + l * stride, tmp[l]);
  }

  // The register-blocked inner loop: for i ascending, acc[q][j] = fma(x_q[i], w[i][j], acc[q][j]).
  // It works on a private copy so the accumulators never have an address (the
  // __may_alias__ vector types would otherwise force a store after every fma).
  template <int P>
  static inline __attribute__((always_inline)) void micro_regs(R (&r)[P][NV], const T* const (&xp)[P], const T* w,
                                                               i64 n) {
    for (i64 i = 0; i < n; ++i) {
      R fv[NV];
      for (int j = 0; j < NV; ++j) fv[j] = V::load(w + i * BW + j * L);
      for (int q = 0; q < P; ++q) {
        const R xv = V::bcast(xp[q][i]);
        for (int j = 0; j < NV; ++j) r[q][j] = V::fma(xv, fv[j], r[q][j]);
      }
    }
  }
  template <int P>
  static inline __attribute__((always_inline)) void micro(R (&acc)[P][NV], const T* const (&xp)[P], const T* w,
                                                          i64 n) {
    R r[P][NV];
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NV; ++j) r[q][j] = acc[q][j];
    micro_regs<P>(r, xp, w, n);
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NV; ++j) acc[q][j] = r[q][j];
  }
  // The same on accumulators kept in a memory tile of P*NV vectors (unaligned).
  template <int P>
  static inline __attribute__((always_inline)) void micro_mem(T* tile, const T* const (&xp)[P], const T* w, i64 n) {
    R r[P][NV];
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NV; ++j) r[q][j] = V::load(tile + (q * NV + j) * L);
    micro_regs<P>(r, xp, w, n);
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NV; ++j) V::store(tile + (q * NV + j) * L, r[q][j]);
  }

  // Unit index u = outer * n + inner with inner counted up across a shard, so
  // the divisions that decode `outer` run once per n units, not per unit.
  struct InnerCounter {
    i64 n, inner, outer;
    InnerCounter(i64 u, i64 n_) : n(n_), inner(u % n_), outer(u / n_) {}
    bool next() {  // true when outer changed
      if (++inner < n) return false;
      inner = 0;
      ++outer;
      return true;
    }
  };

  // ====================================================== Fprop
  // Dense: lanes over BW output channels of one group, PW output pixels of a row.
  template <int P>
  static void fprop_dense(const ConvProblem& p, const Rows<T>& x, const T* f, const T* bias, const OutSpec& y,
                          const CpuExecutor& ex) {
    const i64 cog = p.Cog(), nb = ceil_div(cog, BW), taps = p.KH * p.KW * p.Cg;
    // Filter packed per (group, block): [taps][BW], zero lanes past the group.
    std::vector<T> wp(p.G * nb * taps * BW), bp(p.G * nb * BW, T(0));
    for (i64 g = 0; g < p.G; ++g)
      for (i64 b = 0; b < nb; ++b)
        for (i64 t = 0; t < taps; ++t)
          for (i64 l = 0; l < BW; ++l) {
            const i64 ol = b * BW + l;
            wp[((g * nb + b) * taps + t) * BW + l] = ol < cog ? f[t * p.Co + g * cog + ol] : T(0);
            if (bias && t == 0) bp[(g * nb + b) * BW + l] = ol < cog ? bias[g * cog + ol] : T(0);
          }
    const std::vector<T> zeros(p.Cg + kPad, T(0));
    // One unit is one output row of one channel block. With many input
    // channels the row's accumulators live in a memory tile and each tap
    // (kh, kw) sweeps the whole row, so its filter slice stays in L1; the
    // per-output order (kh, kw, i) is unchanged and an fp round trip through
    // memory is exact. With few channels they stay in registers instead.
    const i64 owb = ceil_div(p.OW, P), units = p.N * p.OH * p.G * nb;
    const bool tap_outer = p.Cg >= 16 && p.KH * p.KW > 1;
    const Strides4 ys = y.s;
    ex.parallel_for(units, taps * BW * p.OW, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      std::vector<T> tile(tap_outer ? owb * P * BW : 0);
      for (i64 u = u0; u < u1; ++u) {
        i64 rem = u;
        const i64 b = rem % nb; rem /= nb;
        const i64 g = rem % p.G; rem /= p.G;
        const i64 oh = rem % p.OH, n = rem / p.OH;
        const T* wg = wp.data() + (g * nb + b) * taps * BW;
        // Input pixels tap (kh, kw) meets for outputs ow0..ow0+P-1 (+0 in padding).
        auto tap = [&](i64 ow0, i64 kh, i64 kw, const T* (&xp)[P]) {
          const i64 ih = fprop_in_row(p, oh, kh);
          const bool row_in = ih >= 0 && ih < p.H;
          for (int q = 0; q < P; ++q) {
            const i64 iw = fprop_in_col(p, ow0 + q, kw);
            xp[q] = (row_in && iw >= 0 && iw < p.W && ow0 + q < p.OW) ? x.row(n * p.H + ih) + iw * p.C + g * p.Cg
                                                                       : zeros.data();
          }
        };
        auto emit = [&](i64 ow0, const R (&acc)[P][NV]) {
          for (int q = 0; q < P; ++q)
            for (int j = 0; j < NV; ++j) {
              if (ow0 + q >= p.OW) continue;
              R a = acc[q][j];
              if (bias) a = V::add(a, V::load(bp.data() + (g * nb + b) * BW + j * L));
              const i64 o = g * cog + b * BW + j * L;
              put_lanes(y, a, ys.at(n, oh, ow0 + q, o), ys.c, cog - (b * BW + j * L));
            }
        };
        if (tap_outer) {
          std::fill(tile.begin(), tile.end(), T(0));
          for (i64 kh = 0; kh < p.KH; ++kh)
            for (i64 kw = 0; kw < p.KW; ++kw) {
              const T* wt = wg + (kh * p.KW + kw) * p.Cg * BW;
              for (i64 wb = 0; wb < owb; ++wb) {
                const T* xp[P];
                tap(wb * P, kh, kw, xp);
                micro_mem<P>(tile.data() + wb * P * BW, xp, wt, p.Cg);
              }
            }
          for (i64 wb = 0; wb < owb; ++wb) {
            R acc[P][NV];
            for (int q = 0; q < P; ++q)
              for (int j = 0; j < NV; ++j) acc[q][j] = V::load(tile.data() + wb * P * BW + (q * NV + j) * L);
            emit(wb * P, acc);
          }
        } else {
          for (i64 wb = 0; wb < owb; ++wb) {
            const i64 ow0 = wb * P;
            // With one group and no width dilation, the (kw, i) part of the fold
            // walks one contiguous run of KW*C input values; where the run lies
            // inside the row for all P outputs, fold it in one sweep.
            const bool run = p.G == 1 && p.dw == 1 && ow0 + P <= p.OW && fprop_in_col(p, ow0, 0) >= 0 &&
                             fprop_in_col(p, ow0 + P - 1, p.KW - 1) < p.W;
            R acc[P][NV];
            for (int q = 0; q < P; ++q)
              for (int j = 0; j < NV; ++j) acc[q][j] = V::zero();
            for (i64 kh = 0; kh < p.KH; ++kh) {
              const i64 ih = fprop_in_row(p, oh, kh);
              if (run && ih >= 0 && ih < p.H) {
                const T* xp[P];
                for (int q = 0; q < P; ++q) xp[q] = x.row(n * p.H + ih) + fprop_in_col(p, ow0 + q, 0) * p.C;
                micro(acc, xp, wg + kh * p.KW * p.Cg * BW, p.KW * p.Cg);
                continue;
              }
              for (i64 kw = 0; kw < p.KW; ++kw) {
                const T* xp[P];
                tap(ow0, kh, kw, xp);
                micro(acc, xp, wg + (kh * p.KW + kw) * p.Cg * BW, p.Cg);
              }
            }
            emit(ow0, acc);
          }
        }
      }
    });
  }

  // Input with each channel repeated cog times, so that lane o of a depthwise
  // kernel reads channel o contiguously (exact copies; kPad zeros at the end).
  static std::vector<T> repeat_channels(const ConvProblem& p, const Rows<T>& x, i64 cog) {
    const i64 rows = p.N * p.H, len = p.W * p.C * cog;
    std::vector<T> out(rows * len + kPad, T(0));
    for (i64 k = 0; k < rows; ++k) {
      const T* src = x.row(k);
      for (i64 e = 0; e < len; ++e) out[k * len + e] = src[e / cog];
    }
    return out;
  }
  static Rows<T> rows_of(const std::vector<T>& v, i64 nrows, i64 len) {
    return Rows<T>{v.data(), len, nrows - 1, v.data() + (nrows - 1) * len};
  }

  // One depthwise block: P output pixels x NW vectors of channels, folded
  // over (kh, kw) on private accumulators (see micro()). xs: channels per input pixel.
  template <int P, int NW>
  static inline __attribute__((always_inline)) void fprop_dw_block(R (&acc)[P][NW], const ConvProblem& p,
                                                                   const Rows<T>& x, i64 xs, const T* wp, i64 cop,
                                                                   const T* zeros, i64 n, i64 oh, i64 ow0, i64 o0,
                                                                   bool interior) {
    R a[P][NW];
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 ih = fprop_in_row(p, oh, kh);
      const bool row_in = ih >= 0 && ih < p.H;
      const T* xrow = row_in ? x.row(n * p.H + ih) + o0 : zeros;
      for (i64 kw = 0; kw < p.KW; ++kw) {
        R fv[NW];
        for (int j = 0; j < NW; ++j) fv[j] = V::load(wp + (kh * p.KW + kw) * cop + o0 + j * L);
        if (interior && row_in) {  // every column in range: plain strided addresses
          const T* x0 = xrow + fprop_in_col(p, ow0, kw) * xs;
          for (int q = 0; q < P; ++q)
            for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::load(x0 + q * p.sw * xs + j * L), fv[j], a[q][j]);
          continue;
        }
        for (int q = 0; q < P; ++q) {
          const i64 iw = fprop_in_col(p, ow0 + q, kw);
          // Padded taps are fma with +0, exactly as the contract says.
          const T* px = (row_in && iw >= 0 && iw < p.W) ? xrow + iw * xs : zeros;
          for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::load(px + j * L), fv[j], a[q][j]);
        }
      }
    }
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = a[q][j];
  }

  // Interior depthwise block for 3-wide filters (no width dilation), stride
  // SW, one vector of channels: each input column is loaded once per row kh
  // and used by every output that meets it. Output q meets column c = q*SW + kw,
  // so sweeping c upwards still gives each output its taps in kw order.
  template <int P, int SW>
  static inline __attribute__((always_inline)) void fprop_dw3_block(R (&acc)[P][1], const ConvProblem& p,
                                                                    const Rows<T>& x, i64 xs, const T* wp, i64 cop,
                                                                    const T* zeros, i64 n, i64 oh, i64 ow0, i64 o0) {
    constexpr int NC = (P - 1) * SW + 3;
    R a[P];
    for (int q = 0; q < P; ++q) a[q] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 ih = fprop_in_row(p, oh, kh);
      const bool row_in = ih >= 0 && ih < p.H;
      // A padded row is fmas with +0 (the contract): the zero vector, column stride 0.
      const T* x0 = row_in ? x.row(n * p.H + ih) + fprop_in_col(p, ow0, 0) * xs + o0 : zeros;
      const i64 cs = row_in ? xs : 0;
      R fv[3];
      for (int kw = 0; kw < 3; ++kw) fv[kw] = V::load(wp + (kh * 3 + kw) * cop + o0);
#pragma GCC unroll 64
      for (int c = 0; c < NC; ++c) {
        const R xv = V::load(x0 + c * cs);
#pragma GCC unroll 3
        for (int kw = 0; kw < 3; ++kw) {
          const int d = c - kw;
          if (d >= 0 && d % SW == 0 && d / SW < P) a[d / SW] = V::fma(xv, fv[kw], a[d / SW]);
        }
      }
    }
    for (int q = 0; q < P; ++q) acc[q][0] = a[q];
  }

  // Prefetches the k-th of `parts` slices of [base, base + bytes): spread over
  // the units of one output row, it brings in what the next row needs.
  static void prefetch_slice(const void* base, i64 bytes, i64 k, i64 parts) {
    const i64 lines = ceil_div(bytes, 64), per = ceil_div(lines, parts);
    const char* c = static_cast<const char*>(base);
    for (i64 l = k * per; l < std::min(lines, (k + 1) * per); ++l) __builtin_prefetch(c + l * 64);
  }

  // Depthwise-like (Cg == 1): lanes over output channels across groups; lane o
  // reads input channel o / cog. Each fold is over (kh, kw) only. Blocks of
  // NW vectors; SW > 0: interior blocks take fprop_dw3_block (NW == 1).
  template <int P, int NW, int SW>
  static void fprop_dw(const ConvProblem& p, const Rows<T>& x, const T* f, const T* bias, const OutSpec& y,
                       const CpuExecutor& ex) {
    constexpr int BD = L * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.Co, BD), cop = nb * BD, khw = p.KH * p.KW;
    std::vector<T> wp(khw * cop + kPad, T(0)), bp(cop + kPad, T(0));
    for (i64 t = 0; t < khw; ++t)
      for (i64 o = 0; o < p.Co; ++o) wp[t * cop + o] = f[t * p.Co + o];
    if (bias)
      for (i64 o = 0; o < p.Co; ++o) bp[o] = bias[o];
    std::vector<T> xr;
    if (cog > 1) xr = repeat_channels(p, x, cog);
    const Rows<T> xin = cog > 1 ? rows_of(xr, p.N * p.H, p.W * p.Co) : x;
    const std::vector<T> zeros(cop + kPad, T(0));
    const i64 owb = ceil_div(p.OW, P), units = p.N * p.OH * nb * owb;
    const Strides4 ys = y.s;
    ex.parallel_for(units, khw * BD * P, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      // Channel blocks innermost: consecutive units read consecutive memory.
      InnerCounter c(u0, nb);
      i64 wb = 0, oh = 0, n = 0;
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          i64 rem = c.outer;
          wb = rem % owb; rem /= owb;
          oh = rem % p.OH; n = rem / p.OH;
        }
        const i64 b = c.inner, ow0 = wb * P, o0 = b * BD;
        // The input rows the next output row adds, prefetched a slice per unit:
        // once a layer outgrows the cache this hides the memory latency.
        const i64 r0 = std::max<i64>(0, fprop_in_row(p, oh, p.KH - 1) + 1);
        const i64 r1 = std::min<i64>(p.H - 1, fprop_in_row(p, oh + 1, p.KH - 1));
        for (i64 r = r0; r <= r1; ++r)
          prefetch_slice(xin.row(n * p.H + r), p.W * p.Co * sizeof(T), wb * nb + b, owb * nb);
        // Interior blocks: all P outputs exist and every kw column is inside the row.
        const bool interior = ow0 + P <= p.OW && fprop_in_col(p, ow0, 0) >= 0 &&
                              fprop_in_col(p, ow0 + P - 1, p.KW - 1) < p.W;
        R acc[P][NW];
        if constexpr (SW > 0) {
          if (interior) fprop_dw3_block<P, SW>(acc, p, xin, p.Co, wp.data(), cop, zeros.data(), n, oh, ow0, o0);
          else fprop_dw_block<P, NW>(acc, p, xin, p.Co, wp.data(), cop, zeros.data(), n, oh, ow0, o0, false);
        } else {
          fprop_dw_block<P, NW>(acc, p, xin, p.Co, wp.data(), cop, zeros.data(), n, oh, ow0, o0, interior);
        }
        for (int q = 0; q < P; ++q)
          for (int j = 0; j < NW; ++j) {
            if (ow0 + q >= p.OW) continue;
            R a = acc[q][j];
            if (bias) a = V::add(a, V::load(bp.data() + o0 + j * L));
            put_lanes(y, a, ys.at(n, oh, ow0 + q, o0 + j * L), ys.c, p.Co - (o0 + j * L));
          }
      }
    });
  }

  static void fprop(const ConvProblem& p, const Rows<T>& x, const T* f, const T* bias, const OutSpec& y,
                    const CpuExecutor& ex) {
    if (p.Cg == 1 && p.Cog() < L) {
      const bool k3 = p.KW == 3 && p.dw == 1;
      if (k3 && p.sw == 1) fprop_dw<8, 1, 1>(p, x, f, bias, y, ex);
      else if (k3 && p.sw == 2) fprop_dw<6, 1, 2>(p, x, f, bias, y, ex);
      else fprop_dw<PW, NV, 0>(p, x, f, bias, y, ex);
    } else {
      fprop_dense<PW>(p, x, f, bias, y, ex);
    }
  }

  // ====================================================== Dgrad
  // A tap that reaches no output is skipped, never multiplied by +0 (that
  // would turn an underflowed -0 accumulator into +0, or 0*inf into NaN).
  // Register blocks therefore hold P input pixels of one stride phase,
  // iw = ph + (k*P + q)*sw: such pixels meet the same taps except at the
  // borders, where the few valid pixels are folded one at a time.
  struct PixelBlocks {
    i64 sw, W, per_phase, blocks_per_phase;
    PixelBlocks(const ConvProblem& p, int P)
        : sw(p.sw), W(p.W), per_phase(ceil_div(p.W, p.sw)), blocks_per_phase(ceil_div(ceil_div(p.W, p.sw), P)) {}
    i64 count() const { return sw * blocks_per_phase; }
    // Columns of the P pixels of block b, -1 past the row.
    template <int P>
    void cols(i64 b, i64 (&iw)[P]) const {
      const i64 ph = b / blocks_per_phase, k = b % blocks_per_phase;
      for (int q = 0; q < P; ++q) {
        const i64 c = ph + (k * P + q) * sw;
        iw[q] = c < W ? c : -1;
      }
    }
  };

  // Folds one (kh, kw) tap of a block: all valid pixels together when the
  // whole block is valid, else each valid pixel alone (same per-lane order).
  // fold(q_mask_all, q) is called with q = -1 for "every pixel".
  template <int P, class Fold>
  static void for_valid_pixels(const bool (&valid)[P], Fold fold) {
    int n = 0;
    for (int q = 0; q < P; ++q) n += valid[q];
    if (n == P) { fold(-1); return; }
    for (int q = 0; q < P; ++q)
      if (valid[q]) fold(q);
  }

  // For input pixels iw[q] (-1: none) of a row whose tap reaches dy row
  // `dy_row`: which of them tap kw reaches too, and the dy pixel (+off) each reaches.
  template <int P>
  static void dgrad_tap_pixels(const ConvProblem& p, const Rows<T>& dy, i64 dy_row, const i64 (&iw)[P], i64 kw,
                               i64 off, const T* (&dp)[P], bool (&valid)[P]) {
    const T* row = dy.row(dy_row) + off;
    for (int q = 0; q < P; ++q) {
      const i64 ow = iw[q] >= 0 ? dgrad_out_col(p, iw[q], kw) : -1;
      valid[q] = ow >= 0;
      dp[q] = valid[q] ? row + ow * p.Co : nullptr;
    }
  }

  // Dense: lanes over BW input channels i of one group. Also every 3-D
  // problem's dx (any group size): depth is folded outermost, (kd, kh, kw, o).
  template <int P>
  static void dgrad_dense(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    const i64 cog = p.Cog(), nb = ceil_div(p.Cg, BW), taps = p.taps();
    // wt[g][b][tap][o_local][BW] = f[tap, b*BW + lane, g*cog + o_local], tap = (kd*KH + kh)*KW + kw
    std::vector<T> wt(p.G * nb * taps * cog * BW);
    for (i64 g = 0; g < p.G; ++g)
      for (i64 b = 0; b < nb; ++b)
        for (i64 t = 0; t < taps; ++t)
          for (i64 ol = 0; ol < cog; ++ol)
            for (i64 l = 0; l < BW; ++l) {
              const i64 i = b * BW + l;
              wt[(((g * nb + b) * taps + t) * cog + ol) * BW + l] =
                  i < p.Cg ? f[(t * p.Cg + i) * p.Co + g * cog + ol] : T(0);
            }
    const PixelBlocks pb(p, P);
    const i64 units = p.N * p.D * p.H * p.G * nb * pb.count();
    const Strides4 xs = dx.s;
    ex.parallel_for(units, taps * cog * BW * P, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      InnerCounter c(u0, pb.count());
      i64 b = 0, g = 0, ih = 0, id = 0, n = 0;
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          i64 rem = c.outer;
          b = rem % nb; rem /= nb;
          g = rem % p.G; rem /= p.G;
          ih = rem % p.H; rem /= p.H;
          id = rem % p.D; n = rem / p.D;
        }
        const i64 wb = c.inner;
        i64 iw[P];
        pb.cols(wb, iw);
        R acc[P][NV];
        for (int q = 0; q < P; ++q)
          for (int j = 0; j < NV; ++j) acc[q][j] = V::zero();
        for (i64 kd = 0; kd < p.KD; ++kd) {
          const i64 od = dgrad_out_dep(p, id, kd);
          if (od < 0) continue;
          for (i64 kh = 0; kh < p.KH; ++kh) {
            const i64 oh = dgrad_out_row(p, ih, kh);
            if (oh < 0) continue;
            for (i64 kw = 0; kw < p.KW; ++kw) {
              const T* dp[P];
              bool valid[P];
              dgrad_tap_pixels<P>(p, dy, (n * p.OD + od) * p.OH + oh, iw, kw, g * cog, dp, valid);
              const T* w = wt.data() + ((g * nb + b) * taps + (kd * p.KH + kh) * p.KW + kw) * cog * BW;
              // Same micro-kernel as the forward pass, over o_local instead of i.
              for_valid_pixels<P>(valid, [&](int only) {
                if (only < 0) {
                  micro(acc, dp, w, cog);
                  return;
                }
                for (int q = 0; q < P; ++q) {  // static q: acc stays in registers
                  if (q != only) continue;
                  R one[1][NV];
                  for (int j = 0; j < NV; ++j) one[0][j] = acc[q][j];
                  const T* const dq[1] = {dp[q]};
                  micro(one, dq, w, cog);
                  for (int j = 0; j < NV; ++j) acc[q][j] = one[0][j];
                }
              });
            }
          }
        }
        for (int q = 0; q < P; ++q)
          for (int j = 0; j < NV; ++j) {
            if (iw[q] < 0) continue;
            const i64 i0 = b * BW + j * L;
            put_lanes(dx, acc[q][j], xs.at5(n, id, ih, iw[q], g * p.Cg + i0), xs.c, p.Cg - i0);
          }
      }
    });
  }

  // dy with each pixel's channels regrouped [m][c] (o = c*cog + m), so that
  // lanes over c are contiguous for each m (exact copies; kPad zeros at the end).
  static std::vector<T> group_major(const ConvProblem& p, const Rows<T>& dy, i64 cog) {
    const i64 rows = p.N * p.OH, len = p.OW * p.Co;
    std::vector<T> out(rows * len + kPad, T(0));
    for (i64 k = 0; k < rows; ++k) {
      const T* src = dy.row(k);
      for (i64 w = 0; w < p.OW; ++w)
        for (i64 m = 0; m < cog; ++m)
          for (i64 c = 0; c < p.C; ++c) out[k * len + w * p.Co + m * p.C + c] = src[w * p.Co + c * cog + m];
    }
    return out;
  }

  // One depthwise dx block (P pixels of one stride phase x NW vectors of
  // channels) on private accumulators; lane c folds (kh, kw, m ascending),
  // skipping taps that reach no output.
  template <int P, int NW>
  static inline __attribute__((always_inline)) void dgrad_dw_block(R (&acc)[P][NW], const ConvProblem& p,
                                                                   const Rows<T>& dy, const T* wt, i64 cp, i64 n,
                                                                   i64 ih, const i64 (&iw)[P], i64 c0) {
    const i64 cog = p.Cog();
    R a[P][NW];
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 oh = dgrad_out_row(p, ih, kh);
      if (oh < 0) continue;
      for (i64 kw = 0; kw < p.KW; ++kw) {
        const T* dp[P];
        bool valid[P];
        dgrad_tap_pixels<P>(p, dy, n * p.OH + oh, iw, kw, c0, dp, valid);
        bool all = true;
        for (int q = 0; q < P; ++q) all &= valid[q];
        for (i64 m = 0; m < cog; ++m) {
          R fv[NW];
          for (int j = 0; j < NW; ++j) fv[j] = V::load(wt + ((kh * p.KW + kw) * cog + m) * cp + c0 + j * L);
          for (int q = 0; q < P; ++q) {
            if (!all && !valid[q]) continue;
            for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::load(dp[q] + m * p.C + j * L), fv[j], a[q][j]);
          }
        }
      }
    }
    for (int q = 0; q < P; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = a[q][j];
  }

  // Interior depthwise dx block for 3-wide filters, stride 1, one output
  // channel per group, one vector: P consecutive pixels iw0 + q, every tap
  // valid. Pixel q meets dy column ow = iw0 + pl + q - kw, i.e. column
  // k = q - kw + 2 of the block's P + 2; sweeping k downwards gives each pixel
  // its taps in kw order, and each dy column is loaded once per row.
  template <int P>
  static inline __attribute__((always_inline)) void dgrad_dw3_block(R (&acc)[P][1], const ConvProblem& p,
                                                                    const Rows<T>& dy, const T* wt, i64 cp, i64 n,
                                                                    i64 ih, i64 iw0, i64 c0) {
    R a[P];
    for (int q = 0; q < P; ++q) a[q] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 oh = dgrad_out_row(p, ih, kh);
      if (oh < 0) continue;
      const T* d0 = dy.row(n * p.OH + oh) + (iw0 + p.pl - 2) * p.C + c0;
      R fv[3];
      for (int kw = 0; kw < 3; ++kw) fv[kw] = V::load(wt + (kh * 3 + kw) * cp + c0);
#pragma GCC unroll 64
      for (int k = P + 1; k >= 0; --k) {
        const R dv = V::load(d0 + k * p.C);
#pragma GCC unroll 3
        for (int kw = 0; kw < 3; ++kw) {
          const int q = k + kw - 2;
          if (q >= 0 && q < P) a[q] = V::fma(dv, fv[kw], a[q]);
        }
      }
    }
    for (int q = 0; q < P; ++q) acc[q][0] = a[q];
  }

  // Depthwise-like (Cg == 1): lanes over input channels c (= groups); lane c
  // folds over its group's output channels c*cog + m, m ascending. Blocks of
  // NW vectors; K3: interior blocks take dgrad_dw3_block (NW == 1).
  template <int P, int NW, bool K3>
  static void dgrad_dw(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    constexpr int BD = L * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.C, BD), cp = nb * BD, khw = p.KH * p.KW;
    // wt[kh][kw][m][c] = f[kh, kw, 0, c*cog + m]
    std::vector<T> wt(khw * cog * cp + kPad, T(0));
    for (i64 t = 0; t < khw; ++t)
      for (i64 m = 0; m < cog; ++m)
        for (i64 c = 0; c < p.C; ++c) wt[(t * cog + m) * cp + c] = f[t * p.Co + c * cog + m];
    std::vector<T> dyg;
    if (cog > 1) dyg = group_major(p, dy, cog);
    const Rows<T> dyin = cog > 1 ? rows_of(dyg, p.N * p.OH, p.OW * p.Co) : dy;
    const PixelBlocks pb(p, P);
    const i64 units = p.N * p.H * nb * pb.count();
    const Strides4 xs = dx.s;
    ex.parallel_for(units, khw * cog * BD * P, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      // Channel blocks innermost: consecutive units read consecutive memory.
      InnerCounter c(u0, nb);
      i64 wb = 0, ih = 0, n = 0;
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          i64 rem = c.outer;
          wb = rem % pb.count(); rem /= pb.count();
          ih = rem % p.H; n = rem / p.H;
        }
        const i64 b = c.inner, c0 = b * BD;
        // The dy row the next input row adds, a slice per unit (see fprop_dw).
        const i64 oh_next = dgrad_out_row(p, ih + 1, 0);
        if (ih + 1 < p.H && oh_next >= 0 && oh_next != dgrad_out_row(p, ih, 0))
          prefetch_slice(dyin.row(n * p.OH + oh_next), p.OW * p.Co * sizeof(T), wb * nb + b, pb.count() * nb);
        i64 iw[P];
        pb.cols(wb, iw);
        R acc[P][NW];
        bool fast = false;  // K3 and every tap of every pixel valid
        if constexpr (K3) {
          fast = iw[P - 1] >= 0 && iw[0] + p.pl - 2 >= 0 && iw[P - 1] + p.pl < p.OW;
          if (fast) dgrad_dw3_block<P>(acc, p, dyin, wt.data(), cp, n, ih, iw[0], c0);
        }
        if (!fast) dgrad_dw_block<P, NW>(acc, p, dyin, wt.data(), cp, n, ih, iw, c0);
        for (int q = 0; q < P; ++q)
          for (int j = 0; j < NW; ++j)
            if (iw[q] >= 0) put_lanes(dx, acc[q][j], xs.at(n, ih, iw[q], c0 + j * L), xs.c, p.C - (c0 + j * L));
      }
    });
  }

  // Few input channels per group (the RGB stem): lanes over input pixels
  // instead of channels. A block is NPV vectors of L pixels of one row and
  // stride phase, iw = iw0 + l*sw, times the CG channels of one group. Tap kw
  // sends lane l to output column ow0 + l, so dy is read transposed,
  // dyt[n*OH + oh][o][ml + ow], with margins for lanes past the borders; a
  // lane whose tap reaches no output keeps its accumulator (select), so every
  // lane folds exactly the taps of dgrad_fold, o ascending.
  // Vectors [V0, V1) of a block, every lane reached: o ascending, dy loaded once per o.
  template <int CG, int NPV, int V0, int V1>
  static inline __attribute__((always_inline)) void dgrad_pix_run(R (&a)[CG][NPV], const T* d, i64 ld, const T* w,
                                                                  i64 cog) {
    for (i64 o = 0; o < cog; ++o) {
      R dv[NPV];
      for (int v = V0; v < V1; ++v) dv[v] = V::load(d + o * ld + v * L);
      for (int i = 0; i < CG; ++i) {
        const R fv = V::bcast(w[o * CG + i]);
        for (int v = V0; v < V1; ++v) a[i][v] = V::fma(dv[v], fv, a[i][v]);
      }
    }
  }

  // One tap for the lanes [lo, hi) it reaches. Lanes from npix on are past
  // the row (never stored, never masked); whole vectors of them are skipped.
  template <int CG, int NPV>
  static inline __attribute__((always_inline)) void dgrad_pix_tap(R (&acc)[CG][NPV], const T* d, i64 ld,
                                                                  const T* w, i64 cog, i64 lo, i64 hi, i64 npix) {
    R a[CG][NPV];
    for (int i = 0; i < CG; ++i)
      for (int v = 0; v < NPV; ++v) a[i][v] = acc[i][v];
    const i64 nu = ceil_div(npix, L), he = hi >= npix ? i64(NPV) * L : hi;
    if (lo == 0 && hi >= npix) {
      switch (nu) {  // the vectors in use, unrolled
        case NPV: dgrad_pix_run<CG, NPV, 0, NPV>(a, d, ld, w, cog); break;
        case 1: dgrad_pix_run<CG, NPV, 0, 1>(a, d, ld, w, cog); break;
        case 2: dgrad_pix_run<CG, NPV, 0, (NPV < 2 ? NPV : 2)>(a, d, ld, w, cog); break;
        default: dgrad_pix_run<CG, NPV, 0, (NPV < 3 ? NPV : 3)>(a, d, ld, w, cog); break;
      }
    } else {
#pragma GCC unroll 8
      for (int v = 0; v < NPV; ++v) {  // border: vector by vector (unrolled: a stays in registers)
        const int vlo = int(std::clamp<i64>(lo - v * L, 0, L)), vhi = int(std::clamp<i64>(he - v * L, 0, L));
        if (v >= nu || vhi <= vlo) continue;
        const typename V::M m = V::lanes(vlo, vhi);
        const bool whole = vlo == 0 && vhi == L;
        for (i64 o = 0; o < cog; ++o) {
          const R dv = V::load(d + o * ld + v * L);
          for (int i = 0; i < CG; ++i) {
            const R r = V::fma(dv, V::bcast(w[o * CG + i]), a[i][v]);
            a[i][v] = whole ? r : V::select(m, r, a[i][v]);
          }
        }
      }
    }
    for (int i = 0; i < CG; ++i)
      for (int v = 0; v < NPV; ++v) acc[i][v] = a[i][v];
  }

  template <int CG, int NPV>
  static void dgrad_pix(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    constexpr int BP = NPV * L;
    const i64 cog = p.Cog(), khw = p.KH * p.KW;
    // wt[g][kh][kw][o_local][i] = f[kh, kw, i, g*cog + o_local]
    std::vector<T> wt(p.G * khw * cog * CG + kPad, T(0));
    for (i64 g = 0; g < p.G; ++g)
      for (i64 t = 0; t < khw; ++t)
        for (i64 ol = 0; ol < cog; ++ol)
          for (i64 i = 0; i < CG; ++i) wt[((g * khw + t) * cog + ol) * CG + i] = f[(t * p.Cg + i) * p.Co + g * cog + ol];
    const i64 bpp = ceil_div(ceil_div(p.W, p.sw), BP), nblk = p.sw * bpp;
    // Columns t = iw + pl - kw*dw that any lane of any block meets.
    const i64 t_min = p.pl - (p.KW - 1) * p.dw, t_max = (p.sw - 1) + (bpp * BP - 1) * p.sw + p.pl;
    const i64 ml = t_min < 0 ? ceil_div(-t_min, p.sw) : 0, mr = std::max<i64>(0, t_max / p.sw + 1 - p.OW);
    const i64 ld = ml + p.OW + mr, row_elems = p.Co * ld;
    // A shard transposes the dy rows it needs into a small cache: the window
    // of output rows one input row meets, plus one, so rows stay while ih advances.
    const i64 slots = ((p.KH - 1) * p.dh) / p.sh + 2;
    const i64 units = p.N * p.H * p.G * nblk;
    const Strides4 xs = dx.s;
    ex.parallel_for(units, khw * cog * CG * BP, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      std::vector<T> cache(slots * row_elems + kPad, T(0));  // margins stay zero
      std::vector<i64> tag(slots, -1);
      auto trow = [&](i64 r) {  // dyt[o][ml + ow] of dy row r
        T* dst = cache.data() + (r % slots) * row_elems;
        if (tag[r % slots] != r) {
          const T* src = dy.row(r);
          for (i64 ow = 0; ow < p.OW; ++ow)
            for (i64 o = 0; o < p.Co; ++o) dst[o * ld + ml + ow] = src[ow * p.Co + o];
          tag[r % slots] = r;
        }
        return dst + ml;
      };
      InnerCounter c(u0, nblk);
      i64 g = 0, ih = 0, n = 0;
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          i64 rem = c.outer;
          g = rem % p.G; rem /= p.G;
          ih = rem % p.H; n = rem / p.H;
        }
        const i64 iw0 = c.inner / bpp + (c.inner % bpp) * BP * p.sw;
        if (iw0 >= p.W) continue;
        const i64 npix = std::min<i64>(BP, ceil_div(p.W - iw0, p.sw));
        R acc[CG][NPV];
        for (int i = 0; i < CG; ++i)
          for (int v = 0; v < NPV; ++v) acc[i][v] = V::zero();
        for (i64 kh = 0; kh < p.KH; ++kh) {
          const i64 oh = dgrad_out_row(p, ih, kh);
          if (oh < 0) continue;
          const T* drow = trow(n * p.OH + oh) + g * cog * ld;
          for (i64 kw = 0; kw < p.KW; ++kw) {
            const i64 t0 = iw0 + p.pl - kw * p.dw;
            if ((t0 % p.sw + p.sw) % p.sw != 0) continue;  // this phase meets no output through kw
            const i64 ow0 = t0 / p.sw, lo = std::max<i64>(0, -ow0), hi = std::min<i64>(BP, p.OW - ow0);
            if (std::min(hi, npix) <= lo) continue;
            dgrad_pix_tap<CG, NPV>(acc, drow + ow0, ld, wt.data() + (g * khw + kh * p.KW + kw) * cog * CG, cog, lo, hi,
                                   npix);
          }
        }
        for (int i = 0; i < CG; ++i)
          for (int v = 0; v < NPV; ++v)
            if (v * L < npix)
              put_lanes(dx, acc[i][v], xs.at(n, ih, iw0 + v * L * p.sw, g * p.Cg + i), xs.w * p.sw, npix - v * L);
      }
    });
  }

  static void dgrad(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    if (p.D != 1 || p.KD != 1) {  // three spatial dimensions: the depth-aware kernel
      dgrad_dense<PW>(p, dy, f, dx, ex);
      return;
    }
    // Pixel lanes when channel lanes would be mostly empty (but not depthwise with many groups).
    if (p.Cg <= 4 && p.Cg * 2 <= L && (p.Cg > 1 || p.C * 2 <= L)) {
      switch (p.Cg) {
        case 1: dgrad_pix<1, 4>(p, dy, f, dx, ex); return;
        case 2: dgrad_pix<2, 4>(p, dy, f, dx, ex); return;
        case 3: dgrad_pix<3, 4>(p, dy, f, dx, ex); return;
        default: dgrad_pix<4, 3>(p, dy, f, dx, ex); return;
      }
    }
    if (p.Cg == 1) {
      if (p.KW == 3 && p.dw == 1 && p.sw == 1 && p.Cog() == 1) dgrad_dw<8, 1, true>(p, dy, f, dx, ex);
      else dgrad_dw<PW, NV, false>(p, dy, f, dx, ex);
      return;
    }
    dgrad_dense<PW>(p, dy, f, dx, ex);
  }

  // ====================================================== Wgrad / Bgrad
  // Stores the first n (<= L: only those) lanes of v to dst; tmp is scratch.
  static void store_lanes(T* dst, R v, i64 n, T* tmp) {
    if (n >= L) {
      V::store(dst, v);
      return;
    }
    V::store(tmp, v);
    for (i64 l = 0; l < n; ++l) dst[l] = tmp[l];
  }

  // The chunk parts' workspace: n elements, every one written by the kernel
  // before combine() reads it, plus kPad zeros (combine reads whole vectors).
  // From the framework's allocator when it offers one.
  class Scratch {
   public:
    Scratch(const CpuExecutor& ex, i64 n) {
      ptr_ = static_cast<T*>(ex.scratch((n + kPad) * i64(sizeof(T))));
      if (!ptr_) {
        own_.reset(new T[n + kPad]);
        ptr_ = own_.get();
      }
      std::fill(ptr_ + n, ptr_ + n + kPad, T(0));
    }
    T* data() const { return ptr_; }
   private:
    std::unique_ptr<T[]> own_;
    T* ptr_;
  };

  // Adds the P chunk parts of every element in chunk order and rounds once.
  static void combine(const Chunks& ch, i64 F, const T* parts, const OutSpec& out, const CpuExecutor& ex) {
    const i64 units = ceil_div(F, L);
    ex.parallel_for(units, ch.P * L, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      for (i64 u = u0; u < u1; ++u) {
        const i64 e0 = u * L;
        R s = V::load(parts + e0);  // parts is padded by kPad
        for (i64 k = 1; k < ch.P; ++k) s = V::add(s, V::load(parts + k * F + e0));
        put_lanes(out, s, e0, 1, F - e0);
      }
    });
  }

  static constexpr i64 kAheadR = 8;  // dy pixels prefetched ahead in dw folds
  // The r loop of one dense dw tile, on private accumulators (see micro()).
  static inline __attribute__((always_inline)) void wgrad_dense_fold(R (&acc)[TI][NV], const ConvProblem& p,
                                                                     const Chunks& ch, i64 k, i64 kh, i64 kw,
                                                                     const Rows<T>& x, i64 xoff, const Rows<T>& dy,
                                                                     i64 dyoff, const T* zeros) {
    R a[TI][NV];
    for (int t = 0; t < TI; ++t)
      for (int j = 0; j < NV; ++j) a[t][j] = V::zero();
    // r ascending, walked one output row segment (fixed n, oh) at a time;
    // one division for the chunk, none per segment.
    i64 n, oh, ow;
    split_r(p, ch.begin(k), n, oh, ow);
    for (i64 r = ch.begin(k), end = ch.end(k); r < end; ow = 0, oh = oh + 1 == p.OH ? 0 : oh + 1, n += oh == 0) {
      const i64 seg = std::min(end - r, p.OW - ow);
      const i64 ih = fprop_in_row(p, oh, kh);
      const bool row_in = ih >= 0 && ih < p.H;
      const T* xrow = row_in ? x.row(n * p.H + ih) + xoff : zeros;
      const T* dyr = dy.row(n * p.OH + oh) + ow * p.Co + dyoff;
      i64 iw = fprop_in_col(p, ow, kw);
      for (i64 e = 0; e < seg; ++e, iw += p.sw, dyr += p.Co) {
        // +0 in padding, exactly as the forward pass.
        const T* xp = (row_in && iw >= 0 && iw < p.W) ? xrow + iw * p.C : zeros;
        __builtin_prefetch(dyr + kAheadR * p.Co);  // dy strides by whole pixels: ahead of the hardware
        R dv[NV];
        for (int j = 0; j < NV; ++j) dv[j] = V::load(dyr + j * L);
        for (int t = 0; t < TI; ++t) {
          const R xv = V::bcast(xp[t]);
          for (int j = 0; j < NV; ++j) a[t][j] = V::fma(xv, dv[j], a[t][j]);
        }
      }
      r += seg;
    }
    for (int t = 0; t < TI; ++t)
      for (int j = 0; j < NV; ++j) acc[t][j] = a[t][j];
  }

  // Dense: lanes over BW output channels of one group, P consecutive i of one
  // (kh, kw) tap in registers; the fold runs over r inside one chunk.
  static void wgrad_dense(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy, T* parts,
                          const CpuExecutor& ex) {
    constexpr int P = TI;
    const i64 cog = p.Cog(), nb = ceil_div(cog, BW), ib = ceil_div(p.Cg, P), F = p.filter_elems();
    const std::vector<T> zeros(P + kPad, T(0));
    const i64 units = ch.P * p.G * nb * p.KH * p.KW * ib;
    ex.parallel_for(units, ch.L * P * BW, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      alignas(64) T tmp[L];
      // Unit u = ((((k*G + g)*KH + kh)*KW + kw)*ib + bi)*nb + b, decoded once and then counted
      // up. Output-channel blocks innermost: one i-block's x values stay in L1 while the
      // chunk's dy rows (all channels) stay in L2.
      i64 rem = u0;
      i64 b = rem % nb; rem /= nb;
      i64 bi = rem % ib; rem /= ib;
      i64 kw = rem % p.KW; rem /= p.KW;
      i64 kh = rem % p.KH; rem /= p.KH;
      i64 g = rem % p.G, k = rem / p.G;
      for (i64 u = u0; u < u1; ++u) {
        if (u > u0 && ++b == nb) {
          b = 0;
          if (++bi == ib) {
            bi = 0;
            if (++kw == p.KW) {
              kw = 0;
              if (++kh == p.KH) {
                kh = 0;
                if (++g == p.G) { g = 0; ++k; }
              }
            }
          }
        }
        const i64 i0 = bi * P, o0 = g * cog + b * BW;
        R acc[P][NV];
        wgrad_dense_fold(acc, p, ch, k, kh, kw, x, g * p.Cg + i0, dy, o0, zeros.data());
        for (int t = 0; t < P; ++t)
          for (int j = 0; j < NV; ++j) {
            if (i0 + t >= p.Cg) continue;
            const i64 ol0 = b * BW + j * L;
            T* dst = parts + k * F + ((kh * p.KW + kw) * p.Cg + i0 + t) * p.Co + g * cog + ol0;
            store_lanes(dst, acc[t][j], cog - ol0, tmp);
          }
      }
    });
  }

  // The r loop of one depthwise dw tile (PW taps kw0.. of row kh x BW
  // channels), on private accumulators, one output row segment at a time.
  // x holds one input channel per output channel (see repeat_channels).
  static inline __attribute__((always_inline)) void wgrad_dw_fold(R (&acc)[PW][NV], const ConvProblem& p,
                                                                  const Chunks& ch, i64 k, i64 kh, i64 kw0, i64 o0,
                                                                  const Rows<T>& x, const Rows<T>& dy,
                                                                  const T* zeros) {
    R a[PW][NV];
    for (int t = 0; t < PW; ++t)
      for (int j = 0; j < NV; ++j) a[t][j] = V::zero();
    for (i64 r = ch.begin(k), end = ch.end(k); r < end;) {
      i64 n, oh, ow;
      split_r(p, r, n, oh, ow);
      const i64 seg = std::min(end - r, p.OW - ow);
      const i64 ih = fprop_in_row(p, oh, kh);
      const bool row_in = ih >= 0 && ih < p.H;
      const T* xrow = row_in ? x.row(n * p.H + ih) + o0 : zeros;
      const T* dyr = dy.row(n * p.OH + oh) + ow * p.Co + o0;
      for (i64 e = 0; e < seg; ++e, ++ow, dyr += p.Co) {
        R dv[NV];
        for (int j = 0; j < NV; ++j) dv[j] = V::load(dyr + j * L);
        for (int t = 0; t < PW; ++t) {
          const i64 iw = fprop_in_col(p, ow, kw0 + t);
          // +0 in padding (and for taps past KW, whose results are dropped).
          const T* px = (row_in && iw >= 0 && iw < p.W && kw0 + t < p.KW) ? xrow + iw * p.Co : zeros;
          for (int j = 0; j < NV; ++j) a[t][j] = V::fma(V::load(px + j * L), dv[j], a[t][j]);
        }
      }
      r += seg;
    }
    for (int t = 0; t < PW; ++t)
      for (int j = 0; j < NV; ++j) acc[t][j] = a[t][j];
  }

  // Depthwise-like (Cg == 1): lanes over all output channels, P taps (kw) of one row.
  static void wgrad_dw(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy, T* parts,
                       const CpuExecutor& ex) {
    constexpr int P = PW;
    const i64 cog = p.Cog(), nb = ceil_div(p.Co, BW), kb = ceil_div(p.KW, P), F = p.filter_elems();
    std::vector<T> xr;
    if (cog > 1) xr = repeat_channels(p, x, cog);
    const Rows<T> xin = cog > 1 ? rows_of(xr, p.N * p.H, p.W * p.Co) : x;
    const std::vector<T> zeros(nb * BW + kPad, T(0));
    const i64 units = ch.P * nb * p.KH * kb;
    ex.parallel_for(units, ch.L * P * BW, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      alignas(64) T tmp[L];
      for (i64 u = u0; u < u1; ++u) {
        i64 rem = u;
        const i64 bk = rem % kb; rem /= kb;
        const i64 kh = rem % p.KH; rem /= p.KH;
        const i64 b = rem % nb, k = rem / nb;
        const i64 kw0 = bk * P, o0 = b * BW;
        R acc[P][NV];
        wgrad_dw_fold(acc, p, ch, k, kh, kw0, o0, xin, dy, zeros.data());
        for (int t = 0; t < P; ++t)
          for (int j = 0; j < NV; ++j) {
            if (kw0 + t >= p.KW) continue;
            T* dst = parts + k * F + (kh * p.KW + kw0 + t) * p.Co + o0 + j * L;
            store_lanes(dst, acc[t][j], p.Co - (o0 + j * L), tmp);
          }
      }
    });
  }

  static void wgrad(const ConvProblem& p, const Rows<T>& x, const Rows<T>& dy, const OutSpec& dw, const CpuExecutor& ex) {
    const i64 F = p.filter_elems();
    const Chunks ch = reduction_chunks(p.R(), F);
    if (ch.P == 0) {  // no outputs: dw = +0
      ex.parallel_for(F, 1, [&](i64 e0, i64 e1) { for (i64 e = e0; e < e1; ++e) dw.put(e, T(0)); });
      return;
    }
    Scratch parts(ex, ch.P * F);
    if (p.Cg == 1 && p.Cog() < L) wgrad_dw(p, ch, x, dy, parts.data(), ex);
    else wgrad_dense(p, ch, x, dy, parts.data(), ex);
    combine(ch, F, parts.data(), dw, ex);
  }

  static void bgrad(const ConvProblem& p, const Rows<T>& dy, const OutSpec& db, const CpuExecutor& ex) {
    const i64 F = p.Co;
    const Chunks ch = reduction_chunks(p.R(), F);
    if (ch.P == 0) {
      for (i64 o = 0; o < F; ++o) db.put(o, T(0));
      return;
    }
    Scratch parts(ex, ch.P * F);
    const i64 nb = ceil_div(F, L);
    ex.parallel_for(ch.P * nb, ch.L * L, [&](i64 u0, i64 u1) {
      FpEnvGuard guard;
      alignas(64) T tmp[L];
      for (i64 u = u0; u < u1; ++u) {
        const i64 b = u % nb, k = u / nb, o0 = b * L;
        R s = V::zero();
        for (i64 r = ch.begin(k), end = ch.end(k); r < end;) {  // r ascending, one output row at a time
          const i64 ow = r % p.OW, seg = std::min(end - r, p.OW - ow);
          const T* d = dy.row(r / p.OW) + ow * F + o0;
          for (i64 e = 0; e < seg; ++e) s = V::add(s, V::load(d + e * F));
          r += seg;
        }
        store_lanes(parts.data() + k * F + o0, s, F - o0, tmp);
      }
    });
    combine(ch, F, parts.data(), db, ex);
  }

  // Peak probe: 12 independent fma chains (enough to cover FMA latency x
  // throughput), iters rounds. Returns the flops done.
  static double fma_probe(i64 iters) {
    R a[12];
    const R m = V::bcast(T(0.9999999)), c = V::bcast(T(1e-7));
    for (int k = 0; k < 12; ++k) a[k] = V::bcast(T(1 + k));
    for (i64 it = 0; it < iters; ++it)
      for (int k = 0; k < 12; ++k) a[k] = V::fma(a[k], m, c);
    alignas(64) T sink[L];
    R s = a[0];
    for (int k = 1; k < 12; ++k) s = V::add(s, a[k]);
    V::store(sink, s);
    volatile T keep = sink[0];
    (void)keep;
    return 2.0 * L * 12 * double(iters);
  }

  static IsaKernels<T> table() { return IsaKernels<T>{&fprop, &dgrad, &wgrad, &bgrad, &fma_probe}; }
};

// binary16 -> binary32 for a run of values (exact; F16C where the ISA has it).
inline void half_run_to_float(const std::uint16_t* src, float* dst, i64 n) {
  i64 k = 0;
#if defined(__F16C__) || defined(DETCONV_HAVE_F16C)
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))));
#endif
  for (; k < n; ++k) dst[k] = half_to_float(src[k]);
}

inline IsaTable make_table() {
  IsaTable t;
  t.half_to_float = &half_run_to_float;
  t.f32 = Kernels<VF>::table();
  t.f64 = Kernels<VD>::table();
  t.h16 = Kernels<VH>::table();
  return t;
}
