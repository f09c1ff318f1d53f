// Input gradient (dx): dense (lanes over input channels; also every 3-D
// problem), depthwise-like, and pixel-lane kernels for few channels per group.
// Part of the kernels of one ISA (kernels_impl.h); shared pieces in kernels_base.h.

template <class V>
struct DgradKernels : KernelBase<V> {
  DETCONV_KERNEL_BASE_NAMES

  // A tap that reaches no output is skipped, never multiplied by +0 (that
  // would turn an underflowed -0 accumulator into +0, or 0*inf into NaN).
  // Register blocks therefore hold pixels of one stride phase,
  // iw = ph + k*sw: such pixels meet the same taps except at the borders,
  // where the few valid pixels are folded one at a time. A phase's pixels run
  // in RowBlocks<NP, NMIN>; with NMIN == NP, a phase's last block, where the
  // phase has NP pixels or more, moves back to end at its last pixel instead:
  // every pixel is real, and pixels q < store_from, which the block before
  // also folds (same bits), are stored by that block only.
  template <int NP, int NMIN>
  struct PixelBlocks {
    using Blocks = typename Base::template RowBlocks<NP, NMIN>;
    i64 sw, W, blocks_per_phase;
    explicit PixelBlocks(const ConvProblem& p)
        : sw(p.sw), W(p.W), blocks_per_phase(Blocks(ceil_div(p.W, p.sw)).count()) {}  // phase 0 has the most
    i64 count() const { return sw * blocks_per_phase; }
    struct Block {
      i64 ph, first;   // pixel q is iw = ph + (first + q)*sw, or none (-1) past the row
      int width = 0;   // 0: this phase has no block b
      int store_from = 0;
      i64 col(int q) const { return first + q; }
    };
    // Block k's pixel columns iw[q], -1 past the row or past the block's width (all -1: no block).
    template <int NB>
    void columns(const Block& k, i64 (&iw)[NB]) const {
      for (int q = 0; q < NB; ++q) {
        const i64 col = k.ph + k.col(q) * sw;
        iw[q] = q < k.width && col < W ? col : -1;
      }
    }
    Block block(i64 b) const {
      Block k;
      k.ph = b / blocks_per_phase;
      const i64 n = k.ph < W ? ceil_div(W - k.ph, sw) : 0, j = b % blocks_per_phase;  // n: the phase's pixels
      if (NMIN == NP) {
        k.first = j * NP;
        k.width = k.first < n ? NP : 0;
        if (k.first + NP > n && n >= NP) {
          k.store_from = int(k.first - (n - NP));
          k.first = n - NP;
        }
        return k;
      }
      const Blocks rb(n);
      if (j < rb.count()) {
        k.first = rb.first(j);
        k.width = rb.width(j);
      }
      return k;
    }
  };

  // Tap kw of a block of NB pixels iw[q] (consecutive pixels of one stride phase, -1 past the row) reaches
  // all of them by stride or none, at dy columns ow0 + q; which pixels it reaches is the same for every
  // (kd, kh), so a block finds this once.
  struct TapCols {
    i64 ow0;       // dy column of pixel 0
    bool any, all; // the tap reaches some / every pixel
    int lo, hi;    // ... pixels [lo, hi): an interval (ow0 + q inside the row, real pixels first)
  };
  template <int NB>
  static void tap_cols(const ConvProblem& p, const i64 (&iw)[NB], TapCols* cols) {
    for (i64 kw = 0; kw < p.KW; ++kw) {
      const i64 t0 = iw[0] + p.pl - kw * p.dw;
      TapCols& tc = cols[kw];
      tc.ow0 = t0 / p.sw;  // exact when the tap reaches the block
      tc.lo = NB;
      tc.hi = 0;
      if (t0 % p.sw == 0)
        for (int q = 0; q < NB; ++q)
          if (iw[q] >= 0 && tc.ow0 + q >= 0 && tc.ow0 + q < p.OW) {
            tc.lo = std::min(tc.lo, q);
            tc.hi = q + 1;
          }
      tc.any = tc.lo < tc.hi;
      tc.all = tc.lo == 0 && tc.hi == NB;
    }
  }

  // fn(kd, kh, row) for each filter row (kd, kh) through which input row (n, id, ih) reaches a dy row, in
  // fold order; row: that dy row from group g's first channel.
  template <class Fn>
  static inline __attribute__((always_inline)) void reached_dy_rows(const ConvProblem& p, const Rows<T>& dy, i64 n,
                                                                    i64 id, i64 ih, i64 g, Fn&& fn) {
    for (DgradReachedRows r(p, id, ih); r.next();) fn(r.kd, r.kh, dy.row((n * p.OD + r.od) * p.OH + r.oh) + g * p.Cog());
  }

  // Dense: lanes over BW input channels i of one group. Also every 3-D
  // problem's dx (any group size): depth is folded outermost, (kd, kh, kw, o).
  template <int NP, int NW = NV, int NMIN = NP>
  static void dgrad_dense(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    constexpr int BW = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.Cg, BW), taps = p.taps();
    const bool prefetch = Base::filter_past_l1(taps * cog * BW);  // (the sweeps' filter reads; Base::micro_regs)
    // wt[g][b][tap][o_local][BW] = f[tap, b*BW + lane, g*cog + o_local], tap = (kd*KH + kh)*KW + kw
    // Packed in parallel, one (g, b, tap) slice a unit, written in order, lane l
    // reading its row i = b*BW + l of f as it goes (contiguous in o_local).
    // Measured, AVX-512, through the op: 3x3 7x7x512 dx 11.5 -> 9.5 ms on two
    // threads, 18.3 -> 16.7 ms on one, against a serial gather of stride Co;
    // AVX2, perf samples in the packing, same layer: 10.0% -> 7.7% against
    // writing each lane's column of the slice in turn. The buffer comes unset
    // from the framework's allocator (a zeroed vector's memset was another 2.3%).
    const Workspace<T> wt(ex, p.G * nb * taps * cog * BW);
    ex.parallel_for(p.G * nb * taps, cog * BW, [&](i64 u0, i64 u1) {
      for (i64 u = u0; u < u1; ++u) {
        const i64 t = u % taps, gb = u / taps, g = gb / nb, b = gb % nb;
        T* dst = wt.data() + u * cog * BW;  // u = (g*nb + b)*taps + t
        const T* src[BW];
        int lanes = 0;  // real input channels of the block; lanes past the group are zeros
        for (; lanes < BW && b * BW + lanes < p.Cg; ++lanes) src[lanes] = f + (t * p.Cg + b * BW + lanes) * p.Co + g * cog;
        for (i64 ol = 0; ol < cog; ++ol, dst += BW) {
          for (int l = 0; l < lanes; ++l) dst[l] = src[l][ol];
          for (int l = lanes; l < BW; ++l) dst[l] = T(0);
        }
      }
    });
    if constexpr (NMIN == NP)
      if (rows_tap_outer(p)) return dgrad_rows_tap_outer<NP, NW>(p, dy, wt.data(), dx, ex);
    const PixelBlocks<NP, NMIN> pb(p);
    const i64 units = p.N * p.D * p.H * p.G * nb * pb.count();
    const Strides4 xs = dx.s;
    // Consecutive units share the dy rows of one input row (channel blocks
    // innermost) or, when the filter outgrows the cache and a channel block's
    // share of it outweighs those rows, one channel block's filter (rows
    // innermost, as fprop_dense): 7x7 rows would otherwise stream the whole
    // filter from memory for 7 pixels a block. Measured (AVX2, one thread):
    // 3x3 7x7x512 22.7 -> 21.7 ms; 1x1 layers are faster without it (1x1
    // 7x7 2048->512: 11.6 vs 12.9 ms).
    const bool rows_inner = taps > 1 && p.filter_elems() * i64(sizeof(T)) > (i64(1) << 20) &&
                            taps * cog * BW > p.KD * p.KH * p.OW * p.Co;
    // Large outputs stream (Base::streamable). In one process, batch 8, two threads, AVX-512: 1x1 14x14
    // 1024->256 5.04 -> 4.60 ms, 3x3 56x56x64 9.93 -> 9.57; C3D 3x3x3 block 98.0 -> 96.7 (AVX2 102.0 -> 101.3).
    const bool stream = Base::streamable(dx, p.x_elems());
    ex.parallel_for(units, taps * cog * BW * NP, [&](i64 u0, i64 u1) {
      FpEnv guard;
      std::vector<TapCols> cols(p.KW);
      std::vector<const T*> tap_x(taps), tap_w(taps);
      std::vector<TapSpan> tap_span(taps);
      InnerCounter c(u0, pb.count());
      i64 b = 0, g = 0, ih = 0, id = 0, n = 0;
      // A group's outputs stream where its channels start on a vector (put_lanes' alignment), else plain.
      const BlockOut streamed(dx, stream, nullptr), plain(dx, false, nullptr);
      // The sweep's tap list (tap_x, tap_w, tap_span: `listed` taps) and, where its block was interior
      // at stride 1 (every tap reaching every pixel), that block's width and first column: the row's
      // next interior block of that width meets the same taps at dy columns moved by its own offset, so
      // it moves the list instead of making it again. One process, batch 8, two threads, AVX2, two runs,
      // ms: 3x3 56x56x64 dx 12.50, 10.63 -> 10.88, 10.36; C3D block 107.5, 104.8 -> 104.7, 102.7;
      // 28x28x128 and 14x14x256 0.3-1% faster, 7x7x512 (no interior block) even.
      i64 listed = 0, list_iw = 0;
      int list_nb = 0;  // 0: no list to move
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          list_nb = 0;  // a new row
          i64 rem = c.outer;
          if (rows_inner) {
            ih = rem % p.H; rem /= p.H;
            id = rem % p.D; rem /= p.D;
            n = rem % p.N; rem /= p.N;
            g = rem % p.G; b = rem / p.G;
          } else {
            b = rem % nb; rem /= nb;
            g = rem % p.G; rem /= p.G;
            ih = rem % p.H; rem /= p.H;
            id = rem % p.D; n = rem / p.D;
          }
        }
        const auto blk = pb.block(c.inner);
        if (blk.width == 0) continue;  // a phase with no pixel here
        // One block of NB pixels (NB == blk.width).
        auto block = [&](auto nb_c) __attribute__((always_inline)) {
          constexpr int NB = decltype(nb_c)::value;
          i64 iw[NB];
          pb.columns(blk, iw);
          Vec acc[NB][NW];
          for (int q = 0; q < NB; ++q)
            for (int j = 0; j < NW; ++j) acc[q][j] = V::zero();
          // Stride 1: the pixels are consecutive columns, so every tap reaches every pixel where the first
          // pixel reaches the last tap and the last pixel the first tap (order.h, dgrad_out_col).
          const bool interior = p.sw == 1 && iw[NB - 1] >= 0 && dgrad_out_col(p, iw[0], p.KW - 1) >= 0 &&
                                dgrad_out_col(p, iw[NB - 1], 0) >= 0;
          if (interior && list_nb == NB) {
            for (i64 k = 0; k < listed; ++k) tap_x[k] += (iw[0] - list_iw) * p.Co;
          } else {
            // A pixel a tap does not reach (or past the row) keeps its bits (micro_range).
            tap_cols<NB>(p, iw, cols.data());
            // Where each kw reaches all pixels, a prefix or a suffix of them (or none: interior blocks and
            // the blocks at a row's edges), the reaching taps are listed and folded after the loop in one
            // sweep (Base::sweep_taps), the accumulators in registers throughout; otherwise each tap folds
            // in the loop. One process, batch 8, two threads, ms, against sweeping interior blocks only,
            // inlined: C3D block AVX2 105.8 -> 102.2, AVX-512 99.6 -> 96.2; 3x3 dx 56x56x64 AVX2 12.21 ->
            // 11.12, AVX-512 9.49 -> 9.20; 28x28x128 9.27 -> 9.10 and 8.56 -> 8.34; 14x14x256 9.73 -> 9.56
            // and 8.17 -> 8.08; 7x7x512 10.63 -> 10.43 and 8.86 -> 8.58; 112x112 32->64 20.51 -> 19.88 and
            // 19.41 -> 19.14.
            bool sweep = true;
            for (i64 kw = 0; kw < p.KW; ++kw) sweep = sweep && (!cols[kw].any || cols[kw].lo == 0 || cols[kw].hi == NB);
            listed = 0;
            reached_dy_rows(p, dy, n, id, ih, g, [&](i64 kd, i64 kh, const T* row) __attribute__((always_inline)) {
              const T* wrow = wt.data() + ((g * nb + b) * taps + (kd * p.KH + kh) * p.KW) * cog * BW;
              if (sweep) {
                for (i64 kw = 0; kw < p.KW; ++kw) {
                  const TapCols& tc = cols[kw];
                  if (!tc.any) continue;
                  tap_x[listed] = row + (tc.ow0 + tc.lo) * p.Co;  // pixel lo's dy column
                  tap_w[listed] = wrow + kw * cog * BW;
                  tap_span[listed++] = TapSpan{tc.lo, tc.hi, nullptr};
                }
                return;
              }
              for (i64 kw = 0; kw < p.KW; ++kw) {
                const TapCols& tc = cols[kw];
                if (!tc.any) continue;
                const T* dp[NB];
                // Same micro-kernel as the forward pass, over o_local instead of i.
                if (tc.all) {
                  for (int q = 0; q < NB; ++q) dp[q] = row + (tc.ow0 + q) * p.Co;
                  Base::template micro<NB, NW>(acc, dp, wrow + kw * cog * BW, cog);
                } else {
                  // Read for q in [lo, hi) only; the others point at a pixel that is (no address past the row).
                  for (int q = 0; q < NB; ++q) dp[q] = row + (tc.ow0 + std::min(std::max(q, tc.lo), tc.hi - 1)) * p.Co;
                  Base::template micro_range<NB, NW>(acc, dp, tc.lo, tc.hi, wrow + kw * cog * BW, cog);
                }
              }
            });
            list_nb = interior ? NB : 0;  // interior: sweep, every tap listed whole
          }
          list_iw = iw[0];
          if (listed > 0) {
            i64 off[NB];
            for (int q = 0; q < NB; ++q) off[q] = q * p.Co;
            if (prefetch) Base::template sweep_taps<NB, NW, true>(acc, tap_x.data(), tap_w.data(), off, listed, cog, tap_span.data());
            else Base::template sweep_taps<NB, NW>(acc, tap_x.data(), tap_w.data(), off, listed, cog, tap_span.data());
          }
          // Through BlockOut, each pixel's offset found once (as fprop_dense's emit), not put_lanes per vector.
          const BlockOut& to = g * p.Cg % kLanes == 0 ? streamed : plain;
          for (int q = 0; q < NB; ++q) {
            if (iw[q] < 0 || q < blk.store_from) continue;
            const i64 off = xs.at5(n, id, ih, iw[q], g * p.Cg + b * BW);
            for (int j = 0; j < NW; ++j) to.put(acc[q][j], off + j * kLanes * xs.c, b * BW + j * kLanes, p.Cg);
          }
        };
        Base::template with_width<NP, NMIN>(blk.width, block);
      }
      if (stream) V::fence();
    });
  }

  // A 3-D input gradient whose filter, with the dy rows one input row reads, outgrows L2 (the C3D block:
  // 442 + 126 KiB against Zen 3's 512) folds each input row tap by tap (dgrad_rows_tap_outer): the
  // register blocks' sweeps would otherwise stream a channel block's whole packed filter (221 KiB) from
  // L2 for every 3 pixels, 21 bytes a cycle, and slow down with whatever else loads that L2 (a busy
  // sibling hyperthread). AVX2, AMD Zen 3, one thread, in one process, fastest / 10th percentile of
  // 40-120 calls, ms: 3x3x3 28x28x128 depth 8 60.7 / 61.6 -> 58.5 / 58.7, 14x14x256 depth 8 61.3 / 64.4
  // -> 58.6 / 59.5, the C3D block at depth 4 26.6 / 27.1 -> 26.0 / 26.1; the C3D block itself (depth 16,
  // batch 2) even (232.9 / 233.4 -> 235.1 / 236.1; two threads 116.2 / 119.0 -> 117.7 / 119.7).
  static bool rows_tap_outer(const ConvProblem& p) {
    return (p.D > 1 || p.KD > 1) && p.taps() > 1 &&
           Base::filter_and_rows_past_l2(p.filter_elems(), p.KD * p.KH * p.OW * p.Co);
  }

  // dgrad_dense's fold with the loops turned (where its blocks are all NP wide: AVX2's 3x4 tile and the
  // scalar path; AVX-512's rows, 7x4 blocks ending in narrower ones, are not measured this way): one unit
  // is one input row of one channel block, whose pixel blocks keep their accumulators in memory tiles
  // while each tap (kd, kh, kw) in turn sweeps them (Base::sweep_tiles), its packed filter slice (cog*BW
  // values, wt as dgrad_dense packs it) held in L1 across the row; a long row goes by segments of at
  // most kTileBytes of tiles, which bounds the lists too. Each pixel still folds its taps in ascending
  // (kd, kh, kw), o ascending within, skipping the taps that reach no output: the same fmas in the same
  // order as dgrad_dense. Rows end in narrower blocks (PixelBlocks<NP, (NP + 1) / 2>: 56 = 18 x 3 + 2)
  // rather than a block moved back over pixels already folded: with the filter slice in L1 a 2-pixel
  // block folds at the fma rate (in registers it would need the slice from L2 at 32 bytes a cycle):
  // 1.8% fewer fmas on the C3D block's rows. Builds in alternating processes, median ratio to tf.nn of
  // adjacent calls: C3D block at depth 4, one thread, 0.930, 0.912 -> 0.947, 0.935; the block itself,
  // two threads, 0.823, 0.862 -> 0.859, 0.903.
  template <int NP, int NW>
  static void dgrad_rows_tap_outer(const ConvProblem& p, const Rows<T>& dy, const T* wt, const OutSpec& dx,
                                   const CpuExecutor& ex) {
    constexpr int BW = kLanes * NW;
    constexpr i64 kTileBytes = i64(8) << 10;  // with the filter slice (8 KiB at 64 x 32 floats), inside L1
    const PixelBlocks<NP, (NP + 1) / 2> pb(p);
    const i64 cog = p.Cog(), nb = ceil_div(p.Cg, BW), taps = p.taps(), blocks = pb.count();
    const i64 seg_max = std::max<i64>(1, kTileBytes / (NP * BW * i64(sizeof(T))));
    const i64 seg = std::max<i64>(1, ceil_div(blocks, std::max<i64>(1, ceil_div(blocks, seg_max))));  // evened
    const bool stream = Base::streamable(dx, p.x_elems());
    const Strides4 xs = dx.s;
    struct Columns {
      i64 iw[NP];
    };
    // Each block's pixel columns and its taps' dy columns are the same for every row, and the dy rows a
    // row reaches the same for all its blocks: both found once (per call, per unit), not per block of
    // each unit. C3D block, one thread, detconv.kernels, fastest of 12 calls in alternating processes,
    // ms: 263.1, 260.1, 262.0 -> 257.6, 250.8, 251.8.
    std::vector<Columns> blk_iw(blocks);
    std::vector<TapCols> blk_cols(blocks * p.KW);
    std::vector<char> blk_empty(blocks);
    for (i64 k = 0; k < blocks; ++k) {
      const auto blk = pb.block(k);
      pb.columns(blk, blk_iw[k].iw);
      blk_empty[k] = blk.width == 0;
      tap_cols<NP>(p, blk_iw[k].iw, blk_cols.data() + k * p.KW);
    }
    struct Reached {
      i64 tap0;  // (kd*KH + kh)*KW
      const T* row;
    };
    // Channel blocks innermost: consecutive units read the same dy rows.
    ex.parallel_for(p.N * p.D * p.H * p.G * nb, taps * cog * BW * p.W, [&](i64 u0, i64 u1) {
      FpEnv guard;
      std::vector<T> tiles(seg * NP * BW);
      std::vector<const T*> tap_x(taps * seg);  // [tap][block]: the block's pixel lo's dy, or null
      std::vector<TapSpan> tap_span(taps * seg);
      std::vector<Reached> reached;
      reached.reserve(p.KD * p.KH);
      i64 off[NP];
      for (int q = 0; q < NP; ++q) off[q] = q * p.Co;
      const BlockOut streamed(dx, stream, nullptr), plain(dx, false, nullptr);
      for (i64 u = u0; u < u1; ++u) {
        i64 rem = u;
        const i64 b = rem % nb;
        rem /= nb;
        const i64 g = rem % p.G;
        rem /= p.G;
        const i64 ih = rem % p.H;
        rem /= p.H;
        const i64 id = rem % p.D, n = rem / p.D;
        const T* wb = wt + (g * nb + b) * taps * cog * BW;
        const BlockOut& to = g * p.Cg % kLanes == 0 ? streamed : plain;
        reached.clear();
        reached_dy_rows(p, dy, n, id, ih, g,
                        [&](i64 kd, i64 kh, const T* row) { reached.push_back(Reached{(kd * p.KH + kh) * p.KW, row}); });
        for (i64 k0 = 0; k0 < blocks; k0 += seg) {
          const i64 kn = std::min(seg, blocks - k0);
          std::fill(tiles.begin(), tiles.end(), T(0));
          std::fill(tap_x.begin(), tap_x.end(), nullptr);
          for (i64 k = 0; k < kn; ++k) {
            if (blk_empty[k0 + k]) continue;
            const TapCols* cols = blk_cols.data() + (k0 + k) * p.KW;
            for (const Reached& r : reached)
              for (i64 kw = 0; kw < p.KW; ++kw) {
                const TapCols& tc = cols[kw];
                if (!tc.any) continue;
                const i64 t = (r.tap0 + kw) * seg + k;
                tap_x[t] = r.row + (tc.ow0 + tc.lo) * p.Co;
                tap_span[t] = TapSpan{tc.lo, tc.hi, nullptr};
              }
          }
          for (i64 t = 0; t < taps; ++t)
            Base::template sweep_tiles<NP, NW>(tiles.data(), tap_x.data() + t * seg, tap_span.data() + t * seg, kn,
                                               off, wb + t * cog * BW, cog);
          for (i64 k = 0; k < kn; ++k) {  // (rows end in narrower blocks: no pixel is folded twice)
            const i64 (&iw)[NP] = blk_iw[k0 + k].iw;
            const T* tile = tiles.data() + k * NP * BW;
            for (int q = 0; q < NP; ++q) {
              if (iw[q] < 0) continue;
              const i64 o = xs.at5(n, id, ih, iw[q], g * p.Cg + b * BW);
              for (int j = 0; j < NW; ++j)
                to.put(V::load(tile + (q * NW + j) * kLanes), o + j * kLanes * xs.c, b * BW + j * kLanes, p.Cg);
            }
          }
        }
      }
      if (stream) V::fence();
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

  // Depthwise dx: tap kw sends pixel k of stride phase ph (iw = ph + k*sw) to
  // dy column cols[ph*KW + kw] + k, or to none (kNoTap): the phase decides
  // whether a tap reaches, so each problem needs this table once and no
  // block divides.
  static constexpr i64 kNoTap = std::numeric_limits<i64>::min();
  static std::vector<i64> phase_tap_cols(const ConvProblem& p) {
    std::vector<i64> cols(p.sw * p.KW, kNoTap);
    for (i64 ph = 0; ph < p.sw; ++ph)
      for (i64 kw = 0; kw < p.KW; ++kw) {
        const i64 t = ph + p.pl - kw * p.dw;  // sw * ow of pixel 0, when divisible
        if (t % p.sw == 0) cols[ph * p.KW + kw] = t / p.sw;
      }
    return cols;
  }

  // One depthwise dx block on private accumulators: pixels k0 + q of one
  // stride phase (tap columns `cols`, as phase_tap_cols) of an input row whose
  // tap kh reaches dy row rows[kh] (nullptr: none), NW vectors of channels
  // from c0. Lane c folds (kh, kw, m ascending) over the taps that reach an
  // output. Pixels q >= real (past a short row) read zeros, never stored.
  // kInner: all NP pixels are real and every tap reaches a dy column inside
  // the row, so no pixel is checked (any stride and filter width).
  // S: dy's element type (T, or Half16 widened as loaded).
  // kPerm (grouped_dx_lanes: Cg input channels per group, kLanes / Cg groups per vector): lane c's dy
  // value for output channel m of its group, dy[.., (c / Cg)*Cog + m], moved into place by a lane permute
  // of the vector's groups' output channels (idx[m]: where each lane's lies), dy read as it is.
  template <int NP, int NW, bool kInner, class S = T, bool kPerm = false>
  static inline __attribute__((always_inline)) void dgrad_dw_block(Vec (&acc)[NP][NW], const ConvProblem& p,
                                                                   const S* const* rows, const i64* cols, const T* wt,
                                                                   i64 cp, i64 k0, int real, i64 c0, const S* zeros,
                                                                   const std::int32_t* idx = nullptr) {
    const i64 cog = p.Cog();
    i64 chan[NW];  // vector j's first dy channel: its lanes' own (group-major dy), or its groups' first
    for (int j = 0; j < NW; ++j) chan[j] = kPerm ? (c0 + j * kLanes) / p.Cg * cog : c0 + j * kLanes;
    Vec a[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      if (!rows[kh]) continue;
      for (i64 kw = 0; kw < p.KW; ++kw) {
        if (cols[kw] == kNoTap) continue;
        const S* d0 = kInner ? rows[kh] + (cols[kw] + k0) * p.Co : nullptr;  // pixel q at d0 + q*Co
        const S* dp[NP];
        bool valid[NP], all = true, any = kInner;
        if constexpr (!kInner)
          for (int q = 0; q < NP; ++q) {
            const i64 ow = cols[kw] + k0 + q;
            valid[q] = q >= real || (ow >= 0 && ow < p.OW);
            dp[q] = q >= real ? zeros : valid[q] ? rows[kh] + ow * p.Co : nullptr;
            all &= valid[q];
            any |= q < real && valid[q];
          }
        if (!any) continue;
        if constexpr (kPerm) {
          Vec dv[NP][NW];  // each pixel's dy values of the block's groups
          for (int q = 0; q < NP; ++q) {
            const S* src = kInner ? d0 + q * p.Co : dp[q] ? dp[q] : zeros;
            for (int j = 0; j < NW; ++j) dv[q][j] = V::load(src + chan[j]);
          }
          for (i64 m = 0; m < cog; ++m) {
            const typename V::P pm = V::perm_index(idx + m * kLanes);
            Vec fv[NW];
            for (int j = 0; j < NW; ++j) fv[j] = V::load(wt + ((kh * p.KW + kw) * cog + m) * cp + c0 + j * kLanes);
            for (int q = 0; q < NP; ++q) {
              if (!kInner && !all && !valid[q]) continue;
              for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::permute(dv[q][j], pm), fv[j], a[q][j]);
            }
          }
          continue;
        }
        for (i64 m = 0; m < cog; ++m) {
          Vec fv[NW];
          for (int j = 0; j < NW; ++j) fv[j] = V::load(wt + ((kh * p.KW + kw) * cog + m) * cp + c0 + j * kLanes);
          for (int q = 0; q < NP; ++q) {
            if (!kInner && !all && !valid[q]) continue;
            const S* src = kInner ? d0 + q * p.Co : dp[q];
            for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::load(src + m * p.C + chan[j]), fv[j], a[q][j]);
          }
        }
      }
    }
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = a[q][j];
  }

  // The dy columns a dgrad_dw_sweep_block<NP, NW, SW, KW> reads: [lo, hi] relative to (iw0 + pl) / SW.
  template <int NP, int SW, int KW>
  struct SweepCols {
    static constexpr int lo = -((KW - 1) / SW), hi = (NP - 1) / SW;
  };

  // Depthwise dx column-sweep block for KW-wide filters (dw_sweep_width), stride SW (1 or 2), one
  // output channel per group, NW vectors: NP consecutive pixels iw0 + q with
  // r = iw0 + pl a multiple of SW. Pixel q meets dy column r/SW + k where
  // q - kw = k*SW; sweeping k downwards gives each pixel its taps in kw
  // order, and each dy column is loaded once per row. Interior blocks read
  // every column; kClip blocks (a row's ends, rows shorter than NP) only the
  // columns inside the row: a tap that meets a column outside reaches no
  // output and is skipped, as the contract says
  // (pixels past a short row fold something, never stored). Against the
  // per-tap block with a check per pixel that row ends took before (2 of 3
  // blocks on a 19-wide row; AVX-512, batch 8, two threads, old and new
  // builds in alternating processes, ms): 3x3 19x19x728 3.35, 3.49 -> 1.78,
  // 1.73; 112x112x32 2.70, 2.63 -> 2.10, 2.38; 56x56x144 3.44, 3.37 ->
  // 2.95, 2.54; 3x3/2 112x112x96 4.56, 4.82 -> 4.11, 4.38.
  template <int NP, int NW, int SW, int KW, class S, bool kClip = false>
  static inline __attribute__((always_inline)) void dgrad_dw_sweep_block(Vec (&acc)[NP][NW], const ConvProblem& p,
                                                                         const S* const* rows, const T* wt, i64 cp,
                                                                         i64 iw0, i64 c0) {
    constexpr int KMIN = SweepCols<NP, SW, KW>::lo, KMAX = SweepCols<NP, SW, KW>::hi;
    Vec a[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      if (!rows[kh]) continue;
      const i64 col = (iw0 + p.pl) / SW;  // the dy column of k = 0
      const S* d0 = rows[kh] + col * p.C + c0;
      Vec fv[KW][NW];
      for (int kw = 0; kw < KW; ++kw)
        for (int j = 0; j < NW; ++j) fv[kw][j] = V::load(wt + (kh * KW + kw) * cp + c0 + j * kLanes);
#pragma GCC unroll 64
      for (int k = KMAX; k >= KMIN; --k) {
        if constexpr (kClip)
          if (col + k < 0 || col + k >= p.OW) continue;
        for (int j = 0; j < NW; ++j) {
          const Vec dv = V::load(d0 + k * p.C + j * kLanes);
#pragma GCC unroll 7
          for (int kw = 0; kw < KW; ++kw) {
            const int q = k * SW + kw;
            if (q >= 0 && q < NP) a[q][j] = V::fma(dv, fv[kw][j], a[q][j]);
          }
        }
      }
    }
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = a[q][j];
  }

  // Depthwise-like (Cg == 1): lanes over input channels c (= groups); lane c
  // folds over its group's output channels c*cog + m, m ascending. A unit is
  // one input row: its dy rows are found once, then blocks of NP pixels of
  // each stride phase (the last one moved back to end at the phase's last
  // pixel, as PixelBlocks with NMIN == NP) times NW vectors of channels, channel
  // blocks innermost. SW3 = 1: every block takes dgrad_dw_sweep_block<1> for KW-wide filters (clipped
  // at the row's ends); SW3 = 2: blocks of NP consecutive pixels (both
  // phases) take dgrad_dw_sweep_block<2> (clipped where they reach past the row),
  // the pixels before the first and after the last such block one at a time.
  // Measured (AVX2, one thread, batch 8): 3x3 112x112x32 3.85 -> 3.30 ms,
  // 3x3/2 112x112x96 13.2 -> 11.2 ms against units of one block each, whose
  // index divisions cost more than their 72 fmas.
  // S: dy's element type (Half16, widened as loaded, only with one output channel per group: see dw_sweep).
  // kPerm (SW3 = 0): grouped layers with Cg > 1 (grouped_dx_lanes), lane c = g*Cg + i folding the
  // output channels g*Cog + m of its group against f[kh, kw, i, g*Cog + m], its dy values permuted into
  // place (dgrad_dw_block) instead of read from a group-major copy.
  template <int NP, int NW, int SW3, class S = T, int KW = 3, bool kPerm = false>
  static void dgrad_dw(const ConvProblem& p, const Rows<S>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    constexpr int BD = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.C, BD), cp = nb * BD, khw = p.KH * p.KW;
    // wt[kh][kw][m][c] = f[kh, kw, c % Cg, (c / Cg)*cog + m] (depthwise: f[kh, kw, 0, c*cog + m])
    std::vector<T> wt(khw * cog * cp + kPad, T(0));
    for (i64 t = 0; t < khw; ++t)
      for (i64 m = 0; m < cog; ++m)
        for (i64 c = 0; c < p.C; ++c) wt[(t * cog + m) * cp + c] = f[(t * p.Cg + c % p.Cg) * p.Co + c / p.Cg * cog + m];
    // idx[m][l]: where lane l's dy value for its group's output channel m lies.
    const std::vector<std::int32_t> idx =
        kPerm ? Base::group_lane_table(p.Cg, cog, cog, cog) : std::vector<std::int32_t>();
    std::vector<S> dyg;
    if constexpr (std::is_same<S, T>::value && !kPerm)
      if (cog > 1) dyg = group_major(p, dy, cog);
    const Rows<S> dyin = !kPerm && cog > 1 ? rows_of(dyg, p.N * p.OH, p.OW * p.Co) : dy;
    const std::vector<i64> tap_cols = phase_tap_cols(p);
    // Per phase: its pixels in a row, and the first and last dy column offsets
    // its taps reach (a block k0 is inside when k0 + lo >= 0 and
    // k0 + NP - 1 + hi < OW).
    std::vector<i64> count(p.sw), lo(p.sw, 0), hi(p.sw, -1);
    for (i64 ph = 0; ph < p.sw; ++ph) {
      count[ph] = ph < p.W ? ceil_div(p.W - ph, p.sw) : 0;
      bool first = true;
      for (i64 kw = 0; kw < p.KW; ++kw) {
        const i64 c = tap_cols[ph * p.KW + kw];
        if (c == kNoTap) continue;
        lo[ph] = first ? c : std::min(lo[ph], c);
        hi[ph] = first ? c : std::max(hi[ph], c);
        first = false;
      }
    }
    const std::vector<S> zeros(p.Co + 2 * kPad, S{});  // what pixels past a short row read
    const Strides4 xs = dx.s;
    const i64 row_blocks = p.sw * ceil_div(ceil_div(p.W, p.sw), NP);  // an upper bound, for prefetch slices
    const SlicePrefetch prefetch(p.OW * p.Co * sizeof(S), row_blocks * nb);
    const bool stream = Base::streamable(dx, p.x_elems());
    ex.parallel_for(p.N * p.H, khw * cog * cp * p.W, [&](i64 u0, i64 u1) {
      FpEnv guard;
      std::vector<const S*> rows(p.KH);
      const BlockOut out(dx, stream, nullptr);
      LineStage<NP, NW> lines(out, stream);
      for (i64 u = u0; u < u1; ++u) {
        const i64 ih = u % p.H, n = u / p.H;
        i64 oh_first = -1;
        for (i64 kh = 0; kh < p.KH; ++kh) {
          const i64 oh = dgrad_out_row(p, ih, kh);
          rows[kh] = oh < 0 ? nullptr : dyin.row(n * p.OH + oh);
          if (kh == 0) oh_first = oh;
        }
        // The dy row the next input row adds, prefetched a slice per block (see fprop_dw).
        const i64 oh_next = ih + 1 < p.H ? dgrad_out_row(p, ih + 1, 0) : -1;
        const S* next = oh_next >= 0 && oh_next != oh_first ? dyin.row(n * p.OH + oh_next) : nullptr;
        auto put = [&](const Vec& v, i64 iw, i64 c) {
          put_lanes(dx, v, xs.at(n, ih, iw, c), xs.c, p.C - c, stream);
        };
        // Pixels [from, real) of a block of NP pixels sw apart from iw0, channel block cb: a block inside
        // the row stores straight from registers, fully unrolled (LineStage::put; put's offsets and
        // put_lanes' tests per vector made GCC keep the loop rolled and spill the accumulators). Batch 8,
        // two threads, in one process, tf.nn alongside, ms: AVX2 3x3 112x112x32 3.30 -> 2.36 (tf 2.32),
        // 56x56x144 3.63 -> 2.85 (2.45), 3x3/2 112x112x96 5.75 -> 3.92 (5.39), 7x7 56x56x96 4.95 -> 4.64,
        // 5x5 28x28x240 2.53 -> 2.42; AVX-512 2.18 -> 1.87, 2.31 -> 2.03, 3.82 -> 3.41, 3.12 -> 2.90,
        // 1.79 -> 1.65.
        auto put_block = [&](const Vec (&acc)[NP][NW], i64 iw0, i64 sw, i64 cb, int from = 0,
                             int real = NP) __attribute__((always_inline)) {
          lines.put(out, acc, out.s.at(n, ih, iw0, cb * BD), sw * out.s.w, cb, nb, cb * BD, p.C, from, real, false);
        };
        if constexpr (SW3 == 2) {
          // Pixel iw alone: its phase's tap columns, as the phase blocks below.
          auto single = [&](i64 iw, i64 c0) {
            Vec acc[1][NW];
            const i64 ph = iw % 2;
            dgrad_dw_block<1, NW, false, S>(acc, p, rows.data(), tap_cols.data() + ph * p.KW, wt.data(), cp, iw / 2, 1, c0,
                                         zeros.data());
            for (int j = 0; j < NW; ++j) put(acc[0][j], iw, c0 + j * kLanes);
          };
          i64 iw = 0, blk = 0;
          for (; iw < p.W && (iw + p.pl) % 2 != 0; ++iw)
            for (i64 b = 0; b < nb; ++b) single(iw, b * BD);
          for (; iw + NP <= p.W; iw += NP, ++blk) {
            const i64 r = (iw + p.pl) / 2;
            const bool fast = r + SweepCols<NP, 2, KW>::lo >= 0 && r + SweepCols<NP, 2, KW>::hi < p.OW;
            for (i64 b = 0; b < nb; ++b) {
              const i64 c0 = b * BD;
              if (next) prefetch(next, blk * nb + b);
              Vec acc[NP][NW];
              if (fast) dgrad_dw_sweep_block<NP, NW, 2, KW, S>(acc, p, rows.data(), wt.data(), cp, iw, c0);
              else dgrad_dw_sweep_block<NP, NW, 2, KW, S, true>(acc, p, rows.data(), wt.data(), cp, iw, c0);
              put_block(acc, iw, 1, b);
            }
          }
          for (; iw < p.W; ++iw)
            for (i64 b = 0; b < nb; ++b) single(iw, b * BD);
          continue;
        }
        // Block k of every phase before block k + NP of any: the stores sweep
        // the row once instead of once per phase. With interior blocks (kInner)
        // and the phase counts above (no division per block), one thread,
        // batch 8, 3x3/2 112x112x96: AVX2 10.3 -> 7.4 ms, AVX-512 8.6 -> 6.3 ms.
        i64 blk = 0;
        for (i64 k = 0; k < count[0]; k += NP) {
          for (i64 ph = 0; ph < p.sw; ++ph, ++blk) {
            const i64 cnt = count[ph];
            if (k >= cnt) continue;
            const i64* cols = tap_cols.data() + ph * p.KW;
            const i64 k0 = cnt >= NP ? std::min(k, cnt - NP) : k;
            const int from = int(k - k0), real = int(std::min<i64>(NP, cnt - k0));
            for (i64 b = 0; b < nb; ++b) {
              const i64 c0 = b * BD;
              if (next) prefetch(next, blk * nb + b);
              Vec acc[NP][NW];
              if constexpr (SW3 == 1) {  // stride 1: iw = k0 + q
                const i64 r = k0 + p.pl;
                if (real == NP && r + SweepCols<NP, 1, KW>::lo >= 0 && r + SweepCols<NP, 1, KW>::hi < p.OW)
                  dgrad_dw_sweep_block<NP, NW, 1, KW, S>(acc, p, rows.data(), wt.data(), cp, k0, c0);
                else
                  dgrad_dw_sweep_block<NP, NW, 1, KW, S, true>(acc, p, rows.data(), wt.data(), cp, k0, c0);
              } else if (real == NP && k0 + lo[ph] >= 0 && k0 + NP - 1 + hi[ph] < p.OW) {
                dgrad_dw_block<NP, NW, true, S, kPerm>(acc, p, rows.data(), cols, wt.data(), cp, k0, real, c0,
                                                       zeros.data(), idx.data());
              } else {
                dgrad_dw_block<NP, NW, false, S, kPerm>(acc, p, rows.data(), cols, wt.data(), cp, k0, real, c0,
                                                        zeros.data(), idx.data());
              }
              put_block(acc, ph + k0 * p.sw, p.sw, b, from, real);
            }
          }
        }
      }
      if (stream) V::fence();
    });
  }

  // Few input channels per group (the RGB stem): lanes over input pixels
  // instead of channels. A block is NPV vectors of kLanes pixels of one row and
  // stride phase, iw = iw0 + l*sw, times the CG channels of one group. Tap kw
  // sends lane l to output column ow0 + l, so dy is read transposed,
  // dyt[n*OH + oh][o][ml + ow], with margins for lanes past the borders; a
  // lane whose tap reaches no output keeps its accumulator (select), so every
  // lane folds exactly the taps of dgrad_fold, o ascending.
  // Vectors [V0, V1) of a block, every lane reached: o ascending, dy loaded once per o.
  template <int CG, int NPV, int V0, int V1>
  static inline __attribute__((always_inline)) void dgrad_pix_run(Vec (&a)[CG][NPV], const T* d, i64 ld, const T* w,
                                                                  i64 cog) {
    for (i64 o = 0; o < cog; ++o) {
      Vec dv[NPV];
      for (int v = V0; v < V1; ++v) dv[v] = V::load(d + o * ld + v * kLanes);
      for (int i = 0; i < CG; ++i) {
        const Vec fv = V::bcast(w[o * CG + i]);
        for (int v = V0; v < V1; ++v) a[i][v] = V::fma(dv[v], fv, a[i][v]);
      }
    }
  }

  // One tap for the lanes [lo, hi) it reaches. Lanes from npix on are past
  // the row (never stored, never masked); whole vectors of them are skipped.
  template <int CG, int NPV>
  static inline __attribute__((always_inline)) void dgrad_pix_tap(Vec (&acc)[CG][NPV], const T* d, i64 ld,
                                                                  const T* w, i64 cog, i64 lo, i64 hi, i64 npix) {
    Vec a[CG][NPV];
    for (int i = 0; i < CG; ++i)
      for (int v = 0; v < NPV; ++v) a[i][v] = acc[i][v];
    const i64 nu = ceil_div(npix, kLanes), he = hi >= npix ? i64(NPV) * kLanes : hi;
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
        const int vlo = int(std::clamp<i64>(lo - v * kLanes, 0, kLanes)), vhi = int(std::clamp<i64>(he - v * kLanes, 0, kLanes));
        if (v >= nu || vhi <= vlo) continue;
        const typename V::M m = V::lanes(vlo, vhi);
        const bool whole = vlo == 0 && vhi == kLanes;
        for (i64 o = 0; o < cog; ++o) {
          const Vec dv = V::load(d + o * ld + v * kLanes);
          for (int i = 0; i < CG; ++i) {
            const Vec r = V::fma(dv, V::bcast(w[o * CG + i]), a[i][v]);
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
    constexpr int BP = NPV * kLanes;
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
      FpEnv guard;
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
        Vec acc[CG][NPV];
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
            if (v * kLanes < npix)
              put_lanes(dx, acc[i][v], xs.at(n, ih, iw0 + v * kLanes * p.sw, g * p.Cg + i), xs.w * p.sw, npix - v * kLanes);
      }
    });
  }

  // The ISA's wide input-gradient tile (DXP pixels x DXW vectors), for groups that fill its vectors.
  static constexpr int DXP = Base::kWideDx ? Base::WideTile::kDx[0] : Base::PD;
  static constexpr int DXW = Base::kWideDx ? Base::WideTile::kDx[1] : NV;
  static constexpr int DXMIN = Base::kWideDx ? Base::WideTile::kDxMin : Base::PD;
  static bool wide_dx(const ConvProblem& p) { return Base::kWideDx && p.Cg >= DXW * kLanes; }

  // AVX2 (PG > PD): 6-pixel blocks (12 fma chains against 8), narrower ones ending each stride phase
  // (RowBlocks), on every row. Two threads, batch 8, in one process, against 4-pixel blocks whose last
  // one moves back: 3x3 dx 14x14x256 13.89 -> 12.81 ms, 28x28x128 12.90 -> 12.07, 56x56x64 13.09 -> 12.82,
  // 48x48x64 7.82 -> 7.26, 24x24x128 7.37 -> 6.98, 112x112 32->64 21.23 -> 19.98; 7x7x512 and the C3D
  // block within noise.
  static void dgrad_tail_blocks(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx,
                                const CpuExecutor& ex) {
    if constexpr (Base::PG > Base::PD) dgrad_dense<Base::PG, NV, Base::kTailMin>(p, dy, f, dx, ex);
  }

  // Grouped layers whose input channels are too few per group to fill a vector (ResNeXt's 4 + 4): lanes
  // across groups (dgrad_dw with kPerm), each group's Cog dy values in reach of one lane permute.
  static bool grouped_dx_lanes(const ConvProblem& p) {
    return p.G > 1 && p.Cg > 1 && p.Cg < kLanes && kLanes % p.Cg == 0 && p.Cog() <= p.Cg;
  }

  // Pixel lanes (dgrad_pix) when channel lanes would be mostly empty (but not depthwise with many groups).
  static bool pixel_lanes(const ConvProblem& p) {
    return p.Cg <= 4 && p.Cg * 2 <= kLanes && (p.Cg > 1 || p.C * 2 <= kLanes);
  }

  // 2-D depthwise with filters of a dw_sweep_width, width stride 1 or 2, one output channel per group:
  // dgrad_dw_sweep_block's units. 5- and 7-wide filters took the per-tap blocks (dgrad_dw_block: a load
  // per fma) before; against them, batch 8, two threads, in one process, medians, ms: AVX-512 5x5/2
  // 56x56x144 3.39 -> 2.69, 5x5 28x28x240 2.43 -> 1.48, 14x14x672 2.30 -> 1.09, 7x7 56x56x96 5.71 ->
  // 2.84; AVX2 4.86 -> 3.95, 3.45 -> 2.15, 3.12 -> 2.86, 7.31 -> 3.78.
  static bool dw_sweep(const ConvProblem& p) {
    return !pixel_lanes(p) && p.Cg == 1 && p.Cog() == 1 && Base::dw_sweeps(p);
  }

  template <class S>
  static void dgrad_dw_sweep(const ConvProblem& p, const Rows<S>& dy, const T* f, const OutSpec& dx,
                             const CpuExecutor& ex) {
    with_dw_sweep_width(p.KW, [&](auto kw_c) {
      constexpr int KW = decltype(kw_c)::value, NW = dw_sweep_vectors(KW);
      if (p.sw == 1) dgrad_dw<dw_sweep_pixels(KW), NW, 1, S, KW>(p, dy, f, dx, ex);
      else dgrad_dw<8 / NW, NW, 2, S, KW>(p, dy, f, dx, ex);
    });
  }

  // A 1x1, stride-1, unpadded, one-group dx is the forward pass of dy with
  // the filter transposed ([Co][C]: f as it is, read with f_transposed):
  // the same fold (o ascending, no tap misses an output), in the forward's
  // 1x1 GEMM blocks over whole images instead of row blocks. Measured (one
  // thread, batch 8), AVX2: 1x1 56x56 256->64 16.9 -> 14.9 ms, 64->256 13.1
  // -> 11.5 ms, 28x28 512->128 12.3 -> 11.2 ms; AVX-512 within noise to
  // -10%. Past kFilterL2Bytes too (two threads, AVX2: 1x1 14x14 1024->256
  // 7.94 -> 6.46 ms, 7x7 2048->512 7.37 -> 6.13 ms; AVX-512 7x7 2048->512,
  // against the dense blocks: AMD Zen 4 5.31 -> 5.88, Intel Xeon 5.87 ->
  // 3.46, where the dense kernel was at 0.54 of oneDNN).
  static bool gemm(const ConvProblem& p) { return !pixel_lanes(p) && p.Cg != 1 && Base::flat_pixels(p) && p.G == 1; }

  template <class S>
  static void dgrad_gemm(const ConvProblem& p, const Rows<S>& dy, const T* f, const OutSpec& dx,
                         const CpuExecutor& ex) {
    ConvProblem q = p;
    q.C = q.Cg = p.Co;
    q.Co = p.C;
    fprop_gemm_transposed<V, S>(q, dy, f, dx, ex);  // (kernels_impl.h)
  }

  // float16 dy read in place (converting dy into a float copy first put the depthwise input gradients at
  // 0.57-0.68 of our float32 speed): dgrad_takes_half (kernels_impl.h) chose this problem, dw_sweep,
  // grouped_dx_lanes or gemm. Grouped layers widen each pixel's dy vector as they load it
  // (dgrad_dw_block); against a float copy of dy, AVX2, batch 8, two threads, in one process, ms: 3x3
  // 56x56 128->128 in 32 groups 11.13 -> 9.52 and 10.71 -> 7.81 (our float32 9.37 and 8.39). (Their
  // filter gradient keeps the copies: read in place, each value widens once per tap, and wgrad_grouped
  // measured even to 8% slower: 10.98 -> 11.84, 12.56 -> 12.35.)
  static void dgrad_half(const ConvProblem& p, const Rows<Half16>& dy, const T* f, const OutSpec& dx,
                         const CpuExecutor& ex) {
    if (gemm(p)) dgrad_gemm<Half16>(p, dy, f, dx, ex);
    else if (grouped_dx_lanes(p)) dgrad_dw<PW, NV, 0, Half16, 3, true>(p, dy, f, dx, ex);
    else dgrad_dw_sweep<Half16>(p, dy, f, dx, ex);
  }

  static void dgrad(const ConvProblem& p, const Rows<T>& dy, const T* f, const OutSpec& dx, const CpuExecutor& ex) {
    if (p.D != 1 || p.KD != 1) {  // three spatial dimensions: the depth-aware kernel
      if (wide_dx(p)) dgrad_dense<DXP, DXW, DXMIN>(p, dy, f, dx, ex);
      else if (Base::PG > Base::PD) dgrad_tail_blocks(p, dy, f, dx, ex);
      else dgrad_dense<Base::PD>(p, dy, f, dx, ex);
      return;
    }
    if (grouped_dx_lanes(p)) {
      // Against pixel lanes (Cg <= 4) or the dense blocks of one group; batch 8, two threads, in one
      // process, medians, ms: 3x3 56x56 128->128 in 32 groups (4 + 4) AVX-512 6.95 -> 2.84, AVX2 7.93 ->
      // 5.74; 28x28 256->256 in 32 groups (8 + 8) AVX-512 10.37 -> 3.84; 56x56 64->64 (2 + 2) 5.61 -> 1.76.
      dgrad_dw<PW, NV, 0, T, 3, true>(p, dy, f, dx, ex);
      return;
    }
    if (pixel_lanes(p)) {
      switch (p.Cg) {
        case 1: dgrad_pix<1, 4>(p, dy, f, dx, ex); return;
        case 2: dgrad_pix<2, 4>(p, dy, f, dx, ex); return;
        case 3: dgrad_pix<3, 4>(p, dy, f, dx, ex); return;
        default: dgrad_pix<4, 3>(p, dy, f, dx, ex); return;
      }
    }
    if (dw_sweep(p)) {
      dgrad_dw_sweep<T>(p, dy, f, dx, ex);
      return;
    }
    if (p.Cg == 1) {
      dgrad_dw<PW, NV, 0>(p, dy, f, dx, ex);
      return;
    }

    if (gemm(p)) {
      dgrad_gemm<T>(p, dy, f, dx, ex);
      return;
    }
    if (p.G > 1 && p.Cg <= kLanes) {
      // One vector of input channels per block where a group has no more (NV vectors left the rest
      // empty): 3x3 14x14 512->512 in 32 groups (16 + 16) AVX-512 3.71 -> 3.09 ms; 28x28 256->256 in
      // 32 groups AVX2 7.81 -> 5.55 (batch 8, two threads, in one process, medians).
      dgrad_dense<Base::PD, 1>(p, dy, f, dx, ex);
      return;
    }
    // Measured (AVX-512): PD 8 vs PW 6, dx geomean 0.71 -> 0.83 of oneDNN; rows of 7, 14 or 28 in whole blocks of 7.
    // AVX-512's wide tile, 7 pixels x 4 vectors, rows ending in blocks of 4-6 (kDxMin), against the 7x2 or
    // 8x2 blocks or 4x4 (Intel Xeon, batch 8, two threads, in one process, ms): 3x3 56x56x64 5.78 -> 5.39,
    // 28x28x128 5.48 -> 5.11, 14x14x256 5.50 -> 5.06, 7x7x512 5.62 -> 5.33, 19x19x128 3.06 -> 2.54 (2.89
    // with the last 7 running past the row), C3D block 65.9 -> 61.3. AVX2's rows end in narrower blocks
    // instead (tail blocks: no waste; 3x3 14x14x256 in one process, 3x4 tile against them: 9.25 vs 8.89 ms
    // and 8.94 vs 8.64; again with the 3x4 tile at 7 loads, AMD Zen 4, two runs: 56x56x64 10.98, 11.55 vs
    // 10.89, 10.96; 14x14x256 10.22, 10.04 vs 9.68, 9.30; 7x7x512 11.81, 11.77 vs 10.78, 10.60).
    if (Base::PG == Base::PD && wide_dx(p)) dgrad_dense<DXP, DXW, DXMIN>(p, dy, f, dx, ex);
    else if (Base::sevens(p.W, Base::PD) && p.sw == 1) dgrad_dense<7>(p, dy, f, dx, ex);
    else if (Base::PG > Base::PD) dgrad_tail_blocks(p, dy, f, dx, ex);
    else dgrad_dense<Base::PD>(p, dy, f, dx, ex);
  }

};
