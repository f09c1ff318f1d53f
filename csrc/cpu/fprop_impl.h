// Forward pass (y = conv(x, f) + bias): dense (lanes over output channels)
// and depthwise-like (Cg == 1) kernels. Part of the kernels of one ISA
// (kernels_impl.h); shared pieces in kernels_base.h.

template <class V>
struct FpropKernels : KernelBase<V> {
  DETCONV_KERNEL_BASE_NAMES

  // Dense: lanes over BF output channels of one group, blocks of NMIN..NP
  // output pixels of a row (RowBlocks; the memory tile path: NP only).
  template <int NP, int NW, int NMIN = NP>
  static void fprop_dense(const ConvProblem& p, const Rows<T>& x, const T* f, const T* bias, const OutSpec& y,
                          const CpuExecutor& ex) {
    constexpr int BF = kLanes * NW;  // output channels per block
    const i64 cog = p.Cog(), nb = ceil_div(cog, BF), taps = p.KH * p.KW * p.Cg;
    // Filter packed per (group, block): [taps][BF], zero lanes past the group;
    // with it, each padded run's one-fma weight (numerics.h,
    // PaddedRun): per (group, block, kh, kw) for a padded tap's i,
    // per (group, block, kh) for a padded row's (kw, i).
    const i64 khw = p.KH * p.KW;
    const Workspace<T> wp(ex, p.G * nb * taps * BF);  // unset: every element is written below
    std::vector<T> bp(p.G * nb * BF, T(0));
    std::vector<T> wtap(p.G * nb * khw * BF), wrow(p.G * nb * p.KH * BF);
    // The runs fold in vectors: lane l is PaddedRun::add on its own values, the
    // same fma (measured, AVX-512, one thread: 3x3 7x7x512 forward spent a
    // third of its time packing with one scalar fold per lane).
    ex.parallel_for(p.G * nb * p.KH, p.KW * p.Cg * BF, [&](i64 u0, i64 u1) {
      FpEnv guard;
      const Vec minus0 = V::bcast(T(-0.0));
      for (i64 u = u0; u < u1; ++u) {
        const i64 gb = u / p.KH, kh = u % p.KH, g = gb / nb, b = gb % nb;
        const bool full = (b + 1) * BF <= cog;  // every lane a real channel
        Vec row[NW];
        for (int j = 0; j < NW; ++j) row[j] = minus0;
        for (i64 kw = 0; kw < p.KW; ++kw) {
          Vec tap[NW];
          for (int j = 0; j < NW; ++j) tap[j] = minus0;
          const i64 t0 = (kh * p.KW + kw) * p.Cg;
          for (i64 t = t0; t < t0 + p.Cg; ++t) {
            T* dst = wp.data() + (gb * taps + t) * BF;
            const T* src = f + t * p.Co + g * cog + b * BF;
            if (full) {
              for (int j = 0; j < NW; ++j) V::store(dst + j * kLanes, V::load(src + j * kLanes));
            } else {
              for (i64 l = 0; l < BF; ++l) dst[l] = b * BF + l < cog ? src[l] : T(0);
            }
            for (int j = 0; j < NW; ++j) tap[j] = V::fma(V::zero(), V::load(dst + j * kLanes), tap[j]);
          }
          for (int j = 0; j < NW; ++j) {
            V::store(wtap.data() + (gb * khw + kh * p.KW + kw) * BF + j * kLanes, tap[j]);
            row[j] = V::fma(V::zero(), tap[j], row[j]);  // PaddedRun::merge
          }
        }
        for (int j = 0; j < NW; ++j) V::store(wrow.data() + (gb * p.KH + kh) * BF + j * kLanes, row[j]);
      }
    });
    if (bias)
      for (i64 gb = 0; gb < p.G * nb; ++gb)
        for (i64 l = 0; l < BF; ++l) {
          const i64 ol = (gb % nb) * BF + l;
          bp[gb * BF + l] = ol < cog ? bias[(gb / nb) * cog + ol] : T(0);
        }
    const std::vector<T> zeros(p.Cg + kPad, T(0));
    // One unit is one output row of one channel block. Its accumulators stay
    // in registers while the block's packed filter (taps*BF values) fits in
    // L2 and streams from there; past that, they live in a memory tile and
    // each tap (kh, kw) sweeps the whole row, so its filter slice stays in L1
    // (an fp round trip through memory is exact; the per-output order is
    // unchanged). Measured on AVX-512: 3x3 56x56x64 0.75 -> 0.94 of oneDNN in
    // registers, 3x3 7x7x512 (590 KiB per block) 0.49 -> 0.58 with the tile.
    const i64 owb = ceil_div(p.OW, NP);
    const typename Base::template RowBlocks<NP, NMIN> blocks(p.OW);
    const bool tap_outer = p.Cg >= 16 && p.KH * p.KW > 1 && !Base::filter_block_in_l2(taps, BF);
    // The interior sweeps' filter reads prefetched (Base::micro_regs), except on AMD. AMD Zen 3, AVX2, C3D
    // block forward with and without, alternating in one process (two copies each, both orders) on a busy
    // host, median ms: two threads 172.5, 172.5, 168.1, 166.1 -> 159.2, 156.4, 150.3, 151.8; depth 4, one
    // thread 39.0, 38.7, 38.8, 38.5 -> 35.3, 35.2, 35.8, 35.4 (the fastest calls even either way).
    const bool prefetch = Base::filter_past_l1(taps * BF) && !cpu_is_amd();
    // Consecutive units share the input rows of one output row (channel blocks
    // innermost) or, when the filter outgrows the cache and a channel block's
    // share of it outweighs the rows, one channel block's filter (rows
    // innermost: e.g. 7x7x512, where every row would otherwise stream the
    // whole filter from memory; measured: 1x1 layers are faster without it),
    // with or without the memory tile (AVX2, one thread, 3x3 7x7x512 in
    // registers: 27.0 -> 24.6 ms).
    const bool rows_inner = p.KH * p.KW > 1 && Base::rows_inner_pays(p.filter_elems(), p.KH * p.W * p.C, taps * BF);
    // In registers, a unit takes bper channel blocks of its row and sweeps
    // them inside each pixel block, so each block writes whole output pixels
    // in order (batch 8, two threads, in one process: 1x1 56x56 64->256
    // forward 8.32 -> 8.01 ms AVX2, 8.92 -> 8.52 AVX-512; 1x1 28x28 128->512
    // 9.95 -> 8.84 and 7.21 -> 6.78; 3x3 layers unchanged); as many blocks as
    // still leave kRowUnits units to share out.
    constexpr i64 kRowUnits = 256;
    const i64 rows = p.N * p.OH * p.G;
    const i64 bper = tap_outer || rows_inner ? 1 : ceil_div(nb, std::min(nb, ceil_div(kRowUnits, rows)));
    const i64 nbg = ceil_div(nb, bper);
    const Strides4 ys = y.s;
    // Large outputs stream (Base::streamable). In one process, batch 8, two threads, AVX-512: 1x1 56x56
    // 64->256 9.90 -> 6.67 ms, 256->64 6.39 -> 5.77, 28x28 128->512 6.72 -> 5.68; 3x3 layers unchanged.
    const bool stream = Base::streamable(y, p.y_elems());
    // Short (kw, i) runs (few input channels: the RGB stem's is 21 values) cost a fold call each, whose
    // fixed costs then weigh: where the ISA's blocks are short (AVX2, Base::kPatches), each pixel block first
    // gathers its pixels' taps in fold order (+0 in padding: the same fmas the contract folds) into a
    // patch its channel blocks share, and folds them in one sweep. In one process, batch 8, two threads,
    // AVX2 stem 7x7/2 224: 15.59 -> 13.95, 12.50 -> 11.81, 13.34 -> 12.35 ms.
    // A segment of pixel blocks (up to kSegmentBytes of patches; half a row of the stem) shares one
    // gather, and its channel blocks sweep it in turn, so one block's packed filter stays in L1 through
    // the segment instead of all of them passing through it for every block (the stem's two are 37 KiB
    // against Zen 3's 32 KiB). AVX2, one thread, alternating in one process, whole-row segments, ms:
    // stem 7x7/2 224 29.8 -> 28.5 (with the emit below 29.7 -> 27.7).
    const bool patches = Base::kPatches && !tap_outer && p.KW * p.Cg < Base::kPatchRun;
    constexpr i64 kSegmentBytes = i64(64) << 10;
    const i64 seg_max = patches ? std::max<i64>(1, kSegmentBytes / (NP * taps * i64(sizeof(T)))) : 1;
    const i64 seg = ceil_div(blocks.count(), ceil_div(blocks.count(), seg_max));  // pixel blocks per segment, evened
    const std::vector<T> zero_patch(patches ? taps + kPad : 0, T(0));  // pixels past the row
    ex.parallel_for(rows * nbg, taps * BF * p.OW * bper, [&](i64 u0, i64 u1) {
      FpEnv guard;
      // One block of NP pixels past the row: a tap's blocks start where its valid columns do.
      std::vector<T> tile(tap_outer ? (owb + 1) * NP * BF : 0);
      std::vector<T> patch(patches ? seg * NP * taps + kPad : 0, T(0));  // one segment's
      i64 seg0 = 0;  // the segment's first pixel
      std::vector<const T*> in_rows(p.KH), row_w(p.KH);  // this output row's input rows (null: padding)
      std::vector<const T*> tap_x(khw), tap_w(khw);  // an edge block's sweep
      std::vector<TapSpan> tap_span(khw);
      for (i64 u = u0; u < u1; ++u) {
        i64 rem = u, b, g, oh, n;
        if (rows_inner) {
          oh = rem % p.OH; rem /= p.OH;
          n = rem % p.N; rem /= p.N;
          g = rem % p.G; b = rem / p.G;
        } else {
          b = rem % nbg * bper; rem /= nbg;
          g = rem % p.G; rem /= p.G;
          oh = rem % p.OH; n = rem / p.OH;
        }
        const i64 b0 = b, b1 = std::min(nb, b0 + bper);
        const BlockOut to(y, stream && g * cog % kLanes == 0, bias ? bp.data() + g * nb * BF : nullptr);
        const T* wg = wp.data() + (g * nb + b) * taps * BF;
        const T* wrg = wrow.data() + (g * nb + b) * p.KH * BF;
        // Tap (kh, kw)'s padded-run weight for channel block b.
        auto run_weight = [&](i64 kh, i64 kw) { return wtap.data() + ((g * nb + b) * khw + kh * p.KW + kw) * BF; };
        // Input row kh of this output row (null: all padding, +0).
        for (i64 kh = 0; kh < p.KH; ++kh) {
          const i64 ih = fprop_in_row(p, oh, kh);
          in_rows[kh] = ih >= 0 && ih < p.H && !x.padded(n * p.H + ih) ? x.row(n * p.H + ih) : nullptr;
        }
        // Input pixels tap (kh, kw) meets for outputs ow0..ow0+NB-1 (+0 in padding).
        auto tap = [&](i64 ow0, i64 kh, i64 kw, auto& xp) {
          constexpr int NB = std::extent<std::remove_reference_t<decltype(xp)>>::value;
          for (int q = 0; q < NB; ++q) {
            const i64 iw = fprop_in_col(p, ow0 + q, kw);
            xp[q] = (in_rows[kh] && iw >= 0 && iw < p.W && ow0 + q < p.OW) ? in_rows[kh] + iw * p.C + g * p.Cg
                                                                          : zeros.data();
          }
        };
        // Through BlockOut, not put_lanes per vector with the offsets from the captures: stem 7x7/2
        // 28.5 -> 27.7 ms (as above), other forward layers within noise.
        auto emit = [&](i64 ow0, const auto& acc) {
          constexpr int NB = std::extent<std::remove_reference_t<decltype(acc)>>::value;
          const i64 ch0 = b * BF, off0 = ys.at(n, oh, ow0, g * cog + ch0), left = p.OW - ow0;
          for (int q = 0; q < NB; ++q)
            if (q < left)
              for (int j = 0; j < NW; ++j)
                to.put(acc[q][j], off0 + q * ys.w + j * kLanes * ys.c, ch0 + j * kLanes, cog);
        };
        // Pixels [o0, o1) of the tile take a run of padded taps as one fma with w.
        auto padded_run = [&](i64 o0, i64 o1, const T* w) {
          Vec wv[NW];
          for (int j = 0; j < NW; ++j) wv[j] = V::load(w + j * kLanes);
          for (i64 o = o0; o < o1; ++o)
            for (int j = 0; j < NW; ++j) {
              T* a = tile.data() + o * BF + j * kLanes;
              V::store(a, V::fma(V::zero(), wv[j], V::load(a)));
            }
        };
        if (tap_outer) {
          std::fill(tile.begin(), tile.end(), T(0));
          for (i64 kh = 0; kh < p.KH; ++kh) {
            if (!in_rows[kh]) {
              padded_run(0, p.OW, wrg + kh * BF);
              continue;
            }
            for (i64 kw = 0; kw < p.KW; ++kw) {
              const T* wt = wg + (kh * p.KW + kw) * p.Cg * BF;
              // Outputs [lo, hi) meet a column inside the row; blocks from lo on fold
              // the tap (a block's pixels past hi read +0: real padded fmas), the
              // pixels no block covers take the tap's padded-run fma.
              const i64 lo = std::min(p.OW, fprop_first_out(p, kw)), hi = std::max(lo, fprop_end_out(p, kw));
              const i64 nblk = ceil_div(hi - lo, NP);
              for (i64 k = 0; k < nblk; ++k) {
                const T* xp[NP];
                tap(lo + k * NP, kh, kw, xp);
                Base::template micro_mem<NP, NW>(tile.data() + (lo + k * NP) * BF, xp, wt, p.Cg);
              }
              padded_run(0, lo, run_weight(kh, kw));
              padded_run(std::min(p.OW, lo + nblk * NP), p.OW, run_weight(kh, kw));
            }
          }
          for (i64 wb = 0; wb < owb; ++wb) {
            Vec acc[NP][NW];
            for (int q = 0; q < NP; ++q)
              for (int j = 0; j < NW; ++j) acc[q][j] = V::load(tile.data() + wb * NP * BF + (q * NW + j) * kLanes);
            emit(wb * NP, acc);
          }
        } else {
          // One block of NB pixels from ow0 for channel block b, accumulators in registers.
          auto block = [&](auto nb_c, i64 ow0) __attribute__((always_inline)) {
            constexpr int NB = decltype(nb_c)::value;
            wg = wp.data() + (g * nb + b) * taps * BF;
            if (patches) {  // the whole fold of each pixel in one sweep of its patch
              const T* xp[NB];
              Vec acc[NB][NW];
              for (int q = 0; q < NB; ++q) {
                xp[q] = ow0 + q < p.OW ? patch.data() + (ow0 - seg0 + q) * taps : zero_patch.data();
                for (int j = 0; j < NW; ++j) acc[q][j] = V::zero();
              }
              Base::template micro<NB, NW>(acc, xp, wg, taps);
              emit(ow0, acc);
              return;
            }
            wrg = wrow.data() + (g * nb + b) * p.KH * BF;
            // With one group and no width dilation, the (kw, i) part of each filter
            // row's fold walks one contiguous run of KW*C input values; where the
            // runs lie inside the row for all NB outputs, all KH rows fold in one
            // sweep with the accumulators in registers throughout (one process,
            // batch 8, two threads, against one call per row: C3D block forward
            // AVX-512 93.2 -> 92.5 ms, AVX2 97.3 -> 96.0; 3x3 2-D layers mostly
            // 0.5-1.5% faster).
            const bool run = p.G == 1 && p.dw == 1 && ow0 + NB <= p.OW && fprop_in_col(p, ow0, 0) >= 0 &&
                             fprop_in_col(p, ow0 + NB - 1, p.KW - 1) < p.W;
            Vec acc[NB][NW];
            for (int q = 0; q < NB; ++q)
              for (int j = 0; j < NW; ++j) acc[q][j] = V::zero();
            if (run) {
              i64 off[NB];
              for (int q = 0; q < NB; ++q) off[q] = fprop_in_col(p, ow0 + q, 0) * p.C;
              for (i64 kh = 0; kh < p.KH; ++kh)  // a padded row: its run weight
                row_w[kh] = in_rows[kh] ? wg + kh * p.KW * p.Cg * BF : wrg + kh * BF;
              if (prefetch) Base::template micro_taps<NB, NW, true>(acc, in_rows.data(), row_w.data(), off, p.KH, p.KW * p.Cg);
              else Base::template micro_taps<NB, NW>(acc, in_rows.data(), row_w.data(), off, p.KH, p.KW * p.Cg);
              emit(ow0, acc);
              return;
            }
            // The block's pixels [lo, hi) that meet a column inside the row at tap kw (and come before OW).
            auto reach = [&](i64 kw) {
              const int lo = int(std::clamp<i64>(fprop_first_out(p, kw) - ow0, 0, NB));
              return std::pair<int, int>(lo, int(std::clamp<i64>(std::min(p.OW, fprop_end_out(p, kw)) - ow0, lo, NB)));
            };
            // Where each tap reaches all pixels, a prefix or a suffix of them, or none (a row's first and
            // last blocks; every block of grouped or width-dilated filters), the taps fold in one sweep
            // (Base::sweep_taps), each pixel outside a tap's span taking its padded run's one fma as below.
            // One process, batch 8, two threads, ms, against the tap-by-tap loop below, AVX-512 / AVX2:
            // C3D block 96.6 -> 94.3 / 97.8 -> 97.3; stem 7x7/2 224 12.22 -> 11.09 / even (patches);
            // 3x3 7x7x512 8.79 -> 8.58 / 9.33 -> 9.13; other 3x3 layers 0-2%; 3x3 28x28 128->128 in 4
            // groups 4.06 -> 3.65 / 5.22 -> 4.91; 3x3 dilation 2 56x56x64 8.74 -> 8.79 / 12.20 -> 11.37.
            bool edge_sweep = true;
            for (i64 kw = 0; kw < p.KW && edge_sweep; ++kw) {
              const auto [lo, hi] = reach(kw);
              edge_sweep = lo == 0 || hi == NB || lo == hi;
            }
            if (edge_sweep) {
              i64 listed = 0, off[NB];
              for (int q = 0; q < NB; ++q) off[q] = q * p.sw * p.C;
              for (i64 kh = 0; kh < p.KH; ++kh) {
                if (!in_rows[kh]) {  // a padded row's (kw, i) in one fma
                  tap_x[listed] = nullptr;
                  tap_w[listed++] = wrg + kh * BF;
                  continue;
                }
                for (i64 kw = 0; kw < p.KW; ++kw, ++listed) {
                  const auto [lo, hi] = reach(kw);
                  const T* wpad = run_weight(kh, kw);
                  tap_x[listed] = lo < hi ? in_rows[kh] + fprop_in_col(p, ow0 + lo, kw) * p.C + g * p.Cg : nullptr;
                  tap_w[listed] = lo < hi ? wg + (kh * p.KW + kw) * p.Cg * BF : wpad;
                  tap_span[listed] = TapSpan{lo, hi, wpad};
                }
              }
              Base::template sweep_taps<NB, NW>(acc, tap_x.data(), tap_w.data(), off, listed, p.Cg, tap_span.data());
              emit(ow0, acc);
              return;
            }
            for (i64 kh = 0; kh < p.KH; ++kh) {
              if (!in_rows[kh]) {  // a padded row's (kw, i) in one fma
                Base::fold_padded_run(acc, wrg + kh * BF);
                continue;
              }
              for (i64 kw = 0; kw < p.KW; ++kw) {
                const T* xp[NB];
                tap(ow0, kh, kw, xp);
                const T* wt = wg + (kh * p.KW + kw) * p.Cg * BF;
                // Pixels [lo, hi) meet a column inside the row and fold the tap; the others
                // before OW take its padded run as one fma (its i's are all padding), and
                // pixels past OW, which are never stored, nothing. One process, batch 8, two
                // threads (ms): AVX2 3x3 56x56x64 9.12 -> 8.92, 28x28x128 9.13 -> 8.70, 14x14x256
                // 8.94 -> 8.58, C3D block 98.0 -> 97.1; AVX-512 3x3 7x7x512 8.75 -> 8.45, the
                // other 3x3 layers and C3D 0-1%; the stem 7x7/2 AVX2 12.69 -> 12.40, AVX-512
                // 11.41 -> 11.58 (its 4-pixel spans of a 21-value run).
                const auto [lo, hi] = reach(kw);
                if (lo == 0 && hi == NB) {
                  Base::template micro<NB, NW>(acc, xp, wt, p.Cg);
                  continue;
                }
                if (lo < hi) Base::template micro_range<NB, NW>(acc, xp, lo, hi, wt, p.Cg);
                Base::fold_padded_run(acc, run_weight(kh, kw), lo, hi, int(std::clamp<i64>(p.OW - ow0, 0, NB)));
              }
            }
            emit(ow0, acc);
          };
          // Pixel ow0 + q's taps (kh, kw, i) in fold order at patch[q * taps], +0 in padding.
          auto gather = [&](i64 ow0, int width) {
            // Whole vectors, in order: a copy's overrun lands where the next copy writes (or in the kPad tail);
            // sources may be read up to kPad values past a pixel (Rows).
            auto copy = [&](T* dst, const T* src, i64 len) {
              for (i64 e = 0; e < len; e += kLanes) V::store(dst + e, src ? V::load(src + e) : V::zero());
            };
            const i64 run = p.KW * p.Cg;
            for (i64 ow = ow0; ow < std::min(p.OW, ow0 + width); ++ow) {
              T* dst = patch.data() + (ow - ow0) * taps;
              const i64 iw0 = fprop_in_col(p, ow, 0);
              const bool inside = p.G == 1 && p.dw == 1 && iw0 >= 0 && fprop_in_col(p, ow, p.KW - 1) < p.W;
              for (i64 kh = 0; kh < p.KH; ++kh, dst += run) {
                if (!in_rows[kh]) {
                  copy(dst, nullptr, run);
                  continue;
                }
                const T* src = in_rows[kh] + g * p.Cg;
                if (inside) {
                  copy(dst, src + iw0 * p.C, run);
                  continue;
                }
                for (i64 kw = 0; kw < p.KW; ++kw) {
                  const i64 iw = fprop_in_col(p, ow, kw);
                  copy(dst + kw * p.Cg, iw >= 0 && iw < p.W ? src + iw * p.C : nullptr, p.Cg);
                }
              }
            }
          };
          for (i64 k0 = 0; k0 < blocks.count(); k0 += seg) {
            const i64 k1 = std::min(blocks.count(), k0 + seg);
            seg0 = blocks.first(k0);
            if (patches) gather(seg0, blocks.first(k1 - 1) + blocks.width(k1 - 1) - seg0);
            for (b = b0; b < b1; ++b)  // channel blocks, the segment's pixel blocks inside
              for (i64 k = k0; k < k1; ++k)
                Base::template with_width<NP, NMIN>(blocks.width(k), [&](auto nb_c) __attribute__((always_inline)) {
                  block(nb_c, blocks.first(k));
                });
          }
        }
      }
      if (stream) V::fence();
    });
  }

  // 1x1, stride 1, no padding, one group: a GEMM over all N*H*W pixels
  // (flattened: blocks run across rows), for filters past L2 and, where its
  // block is the larger (AVX2), for every such forward and input gradient. A
  // unit is MB pixels of one channel block. A fold that fits one chunk of KC
  // stays in registers; a longer one keeps its accumulators in a memory tile
  // and runs in chunks of KC, in order, so each chunk's filter slice (KC x BF,
  // 32 KiB) stays in L1 across the unit's pixel blocks instead of the whole
  // block's filter streaming from L3 for every 8 pixels.
  // f_transposed: f is [Co][Cg] (a 1x1 input gradient's filter as it comes), not [Cg][Co].
  // S: x's element type; Half16 x is widened per unit (its MB pixels, once for all its channel blocks)
  // into a small buffer instead of into a float copy of the whole tensor first: these layers stream x
  // once from memory, and the copy cost about as much as the GEMM.
  template <int NP, int NW, class S = T>
  static void fprop_1x1(const ConvProblem& p, const Rows<S>& x, const T* f, const T* bias, const OutSpec& y,
                        const CpuExecutor& ex, bool f_transposed = false) {
    constexpr int BF = kLanes * NW;
    constexpr i64 MBMAX = 8 * NP, KC = (i64(32) << 10) / (BF * i64(sizeof(T)));
    const i64 nb = ceil_div(p.Co, BF), M = p.N * p.H * p.W, K = p.Cg;
    // Up to 8 pixel blocks per unit, as many in each unit (1x1 7x7 2048->512
    // at batch 1 was 49 pixels in units of 48 and 1: AVX2, one thread, 3.02 ->
    // 2.50 ms; batch 8, 392 pixels, 11.0 -> 10.2 ms); blocks past M are skipped.
    const i64 MB = NP * ceil_div(ceil_div(M, NP), ceil_div(M, MBMAX));
    const Workspace<T> wp(ex, nb * K * BF);  // unset: every element is written below
    std::vector<T> bp(nb * BF, T(0));
    if (f_transposed) {
      // Lane l of row (b, i) is f[b*BF + l][i]. Units of kIB values of i read each of the BF rows along i;
      // reading one i of every row (a value per row, rows K values apart: at K = 2048, 8 KiB, all in one
      // L1 set) missed L1 on every value: 1x1 7x7 2048->512 input gradient, 12% of its time in the copy
      // (`perf`). Alternating in one process, two threads, ms: batch 8 5.78 -> 5.48, batch 1 2.02 -> 1.67;
      // 14x14 1024->256 5.00 -> 4.89, the 1x1 56x56 layers even.
      constexpr i64 kIB = 16;
      const i64 nib = ceil_div(K, kIB);
      ex.parallel_for(nb * nib, kIB * BF, [&](i64 u0, i64 u1) {
        for (i64 u = u0; u < u1; ++u) {
          const i64 b = u / nib, i0 = u % nib * kIB, ni = std::min(kIB, K - i0);
          T* dst = wp.data() + (b * K + i0) * BF;
          for (i64 l = 0; l < BF; ++l) {
            if (b * BF + l < p.Co) {
              const T* src = f + (b * BF + l) * K + i0;
              for (i64 j = 0; j < ni; ++j) dst[j * BF + l] = src[j];
            } else {
              for (i64 j = 0; j < ni; ++j) dst[j * BF + l] = T(0);
            }
          }
        }
      });
    } else {
      ex.parallel_for(nb * K, BF, [&](i64 u0, i64 u1) {
        for (i64 u = u0; u < u1; ++u) {
          const i64 b = u / K, i = u % K;
          const T* src = f + i * p.Co + b * BF;
          if ((b + 1) * BF <= p.Co) {  // a whole block: vector copies (1x1 7x7 2048->512, batch 1: 2.94 -> 2.67 ms)
            for (int j = 0; j < NW; ++j) V::store(wp.data() + u * BF + j * kLanes, V::load(src + j * kLanes));
          } else {
            for (i64 l = 0; l < BF; ++l) wp.data()[u * BF + l] = b * BF + l < p.Co ? src[l] : T(0);
          }
        }
      });
    }
    if (bias)
      for (i64 o = 0; o < p.Co; ++o) bp[o] = bias[o];
    const std::vector<T> zeros(K + kPad, T(0));  // what pixels past the end read
    const Strides4 ys = y.s;
    // Large outputs stream (whole vectors past the cache; Base::streamable). In one process, batch 8, two
    // threads: 1x1 56x56 64->256 7.32 -> 7.11 ms (AVX2), 28x28 128->512 7.26 -> 6.63; as the input
    // gradient, 1x1 56x56 256->64 8.95 -> 8.14 (AVX2), 10.72 -> 7.90 (AVX-512).
    const bool stream = Base::streamable(y, p.y_elems());
    // A streamed 16-bit out: one channel block's rounded vectors fill part of each pixel's 64-byte line
    // (AVX2: 16 channels, 32 bytes), the next block the rest one unit (up to MB*K*BF fmas) later, and a
    // part line leaves the write-combining buffer alone, as a partial write. So the units of one line's
    // `per` blocks stage their rounded vectors where all of them run in this shard (channel blocks are
    // innermost: consecutive units), and the last of them streams the whole lines; the other units
    // store their 16-bit vectors plainly, as do all where the lines are not 64-byte aligned. AVX2,
    // float16, batch 8, two threads, in one process, ms, streamed / plain / staged: 1x1 56x56 64->256
    // forward 9.21 / 8.17 / 7.38 and 11.86 / 11.01 / 9.37, 256->64 input gradient 9.47 / 9.78 / 8.06
    // and 11.32 / 9.92 / 8.54 (our float32 7.46 and 8.94; 6.91 and 8.59); bfloat16 alike.
    constexpr int kLine = 64, kHalfBlock = BF * 2;
    const bool part_lines = stream && Base::half_out(y) && kHalfBlock < kLine;  // (stream: channels contiguous)
    const i64 per = part_lines && kLine % kHalfBlock == 0 && Base::aligned_to(y, kLine, 2) ? kLine / kHalfBlock : 1;
    ex.parallel_for(ceil_div(M, MB) * nb, MB * K * BF, [&](i64 u0, i64 u1) {
      FpEnv guard;
      std::vector<T> tile(K > KC ? MBMAX * BF : 0);
      const BlockOut out(y, stream, bias ? bp.data() : nullptr), plain(y, false, bias ? bp.data() : nullptr);
      alignas(64) unsigned char stage[MBMAX][kLine];  // a unit's pixels' lines (per > 1)
      constexpr bool kWiden = !std::is_same<S, T>::value;
      std::vector<T> xw(kWiden ? MB * p.C + kPad : 0);  // widened pixels, stride C (whole-vector stores)
      const T* px[MBMAX];  // pixel m0 + q's input channels
      i64 yo[MBMAX];       // ... and its output offset
      for (i64 u = u0; u < u1; ++u) {
        const i64 b = u % nb, m0 = u / nb * MB;  // channel blocks innermost: they share the pixels
        const T* wb = wp.data() + b * K * BF;
        // The unit's pixels, by increments rather than two 64-bit divisions each (by instruction
        // latencies, not measured alone: at K = 64 those were comparable to a third of the fmas' cycles),
        // and only where they change: the shard's first unit and each first channel block, whose
        // followers share them (and the widened copy). Set up again for every channel block, they cost
        // AVX2, batch 8, two threads, in one process, tf.nn alongside, ms, two runs: 1x1 56x56 64->256
        // 11.4 -> 8.5, 11.1 -> 8.8; 256->64 dx 10.1 -> 8.9, 9.7 -> 8.7; 14x14 1024->256 dx 8.2 -> 7.5;
        // AVX-512 3-7% (56x56 256->64 dx 5.06 -> 4.70).
        if (u == u0 || b == 0) {
          i64 row = m0 / p.W, col = m0 % p.W, n = row / p.H, oh = row % p.H;
          for (i64 q = 0; q < MB; ++q) {
            const bool in = m0 + q < M;
            if constexpr (kWiden) {
              // Stores past the pixel: the next pixel overwrites them (kPad after the last).
              if (in) widen_run(x.row(row) + col * p.C, xw.data() + q * p.C, p.C);
              px[q] = in ? xw.data() + q * p.C : zeros.data();
            } else {
              px[q] = in ? x.row(row) + col * p.C : zeros.data();
            }
            yo[q] = in ? ys.at(n, oh, col, 0) : 0;
            if (++col == p.W) {
              col = 0;
              ++row;
              if (++oh == p.H) oh = 0, ++n;
            }
          }
        }
        // A block whose pixels are one run (all but those reaching the last row's padded copy or past M)
        // is read as a PixelRun: 1x1 56x56 256->64 dx, AVX-512, 5.42 -> 4.89 ms and 5.81 -> 5.14; 14x14
        // 1024->256 dx 4.52 -> 4.43, forward 4.26 -> 4.16; AVX2 even to 3% faster.
        auto one_run = [&](const T* const (&xp)[NP]) {
          for (int q = 1; q < NP; ++q)
            if (xp[q] != xp[0] + q * p.C) return false;
          return true;
        };
        const i64 slot = b % per, lead = b - slot;  // this block's place in its line, the line's first block
        const bool staged = per > 1 && u - slot >= u0 && u - slot + per <= u1 && (lead + per) * BF <= p.Co;
        const BlockOut& to = part_lines ? plain : out;
        auto put = [&](i64 q, int j, Vec a) {
          const i64 o = b * BF + j * kLanes;
          if (staged) out.round_to(a, o, stage[q] + (slot * NW + j) * kLanes * 2);
          else to.put(a, yo[q] + o * out.s.c, o, p.Co);
        };
        // The unit's pixels' staged lines out, once the line's last block is in.
        auto flush = [&] {
          if (!staged || slot != per - 1) return;
          constexpr int kVb = int(sizeof(Vec));
          for (i64 q = 0; q < MB && m0 + q < M; ++q)
            for (int k = 0; k < kLine / kVb; ++k) out.stream_raw(yo[q] + lead * BF + k * (kVb / 2), stage[q] + k * kVb);
        };
        if (K <= KC) {  // one chunk: the whole fold in registers, no tile
          for (i64 q0 = 0; q0 < MB && m0 + q0 < M; q0 += NP) {
            const T* xp[NP];
            Vec acc[NP][NW];
            for (int q = 0; q < NP; ++q) {
              xp[q] = px[q0 + q];
              for (int j = 0; j < NW; ++j) acc[q][j] = V::zero();
            }
            if (one_run(xp)) Base::template micro<NP, NW>(acc, PixelRun{xp[0], p.C}, wb, K);
            else Base::template micro<NP, NW>(acc, xp, wb, K);
            // A block inside M stores straight from registers, fully unrolled: with the loop bounded at
            // run time GCC kept it rolled, spilled the accumulators and reloaded each per store (with the
            // output fields). AVX2, batch 8, two threads, in one process, tf.nn alongside, two runs, ms:
            // 1x1 56x56 64->256 fwd 12.17 -> 10.96, 8.99 -> 7.94; 256->64 dx 12.39 -> 11.15, 12.34 ->
            // 11.14, fwd 2-3%; 14x14 1024->256 dx 2-4%; AVX-512 64->256 fwd 4.80 -> 4.36, 4.74 -> 4.34,
            // the others even. (Without the pragmas GCC kept this loop rolled too: measured even.)
            if (m0 + q0 + NP <= M) {
#pragma GCC unroll 16
              for (int q = 0; q < NP; ++q)
#pragma GCC unroll 16
                for (int j = 0; j < NW; ++j) put(q0 + q, j, acc[q][j]);
            } else {
              for (int q = 0; q < NP && m0 + q0 + q < M; ++q)
                for (int j = 0; j < NW; ++j) put(q0 + q, j, acc[q][j]);
            }
          }
          flush();
          continue;
        }
        std::fill(tile.begin(), tile.end(), T(0));
        for (i64 k0 = 0; k0 < K; k0 += KC) {
          const i64 kn = std::min(KC, K - k0);
          for (i64 q0 = 0; q0 < MB && m0 + q0 < M; q0 += NP) {
            const T* xp[NP];
            for (int q = 0; q < NP; ++q) xp[q] = px[q0 + q] + k0;
            T* tb = tile.data() + q0 * BF;
            if (one_run(xp)) Base::template micro_mem<NP, NW>(tb, PixelRun{xp[0], p.C}, wb + k0 * BF, kn);
            else Base::template micro_mem<NP, NW>(tb, xp, wb + k0 * BF, kn);
          }
        }
        for (i64 q = 0; q < MB && m0 + q < M; ++q)
          for (int j = 0; j < NW; ++j) put(q, j, V::load(tile.data() + q * BF + j * kLanes));
        flush();
      }
      if (stream) V::fence();
    });
  }

  // Whether a 1x1 problem's outputs (Co channels) fill the ISA's wide GEMM tile (V::Wide::kGemm).
  static bool wide_gemm(const ConvProblem& p) {
    return Base::kWideGemm && Base::fills_blocks(p.Co, Base::WideTile::kGemm[1] * kLanes);
  }
  // fprop_1x1 on the wide GEMM tile where wide_gemm(p), else on PG x NV blocks. AVX-512's 7x4 against
  // 8x2, as input gradients (f_transposed; Intel Xeon, batch 8, two threads, in one process, ms): 1x1
  // 56x56 256->64 3.32 -> 3.08, 64->256 2.81 -> 2.71, 14x14 1024->256 2.88 -> 2.79, 7x7 2048->512 even.
  template <class S = T>
  static void fprop_gemm(const ConvProblem& p, const Rows<S>& x, const T* f, const T* bias, const OutSpec& y,
                         const CpuExecutor& ex, bool f_transposed = false) {
    if constexpr (Base::kWideGemm) {
      if (wide_gemm(p)) {
        fprop_1x1<Base::WideTile::kGemm[0], Base::WideTile::kGemm[1], S>(p, x, f, bias, y, ex, f_transposed);
        return;
      }
    }
    fprop_1x1<Base::PG, NV, S>(p, x, f, bias, y, ex, f_transposed);
  }

  // The filter and bias of blocks with lanes over output channels across groups (fprop_dw,
  // fprop_grouped): `rows` rows of cop (whole blocks of lanes) values each, +0 past Co, so that every
  // vector loads whole.
  struct LaneFilter {
    std::vector<T> w, b;
    LaneFilter(const T* f, const T* bias, i64 rows, i64 Co, i64 cop) : w(rows * cop + kPad, T(0)), b(cop + kPad, T(0)) {
      for (i64 t = 0; t < rows; ++t)
        for (i64 o = 0; o < Co; ++o) w[t * cop + o] = f[t * Co + o];
      if (bias)
        for (i64 o = 0; o < Co; ++o) b[o] = bias[o];
    }
  };

  // One depthwise block: NP output pixels x NW vectors of channels, folded
  // over (kh, kw) on private accumulators (see micro()). xs: channels per input pixel.
  // S: x's element type (T, or Half16 widened as loaded).
  template <int NP, int NW, class S>
  static inline __attribute__((always_inline)) void fprop_dw_block(Vec (&acc)[NP][NW], const ConvProblem& p,
                                                                   const Rows<S>& x, i64 xs, const T* wp, i64 cop,
                                                                   const S* zeros, i64 n, i64 oh, i64 ow0, i64 o0,
                                                                   bool interior) {
    Vec a[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 ih = fprop_in_row(p, oh, kh);
      const bool row_in = ih >= 0 && ih < p.H;
      const S* xrow = row_in ? x.row(n * p.H + ih) + o0 : zeros;
      for (i64 kw = 0; kw < p.KW; ++kw) {
        Vec fv[NW];
        for (int j = 0; j < NW; ++j) fv[j] = V::load(wp + (kh * p.KW + kw) * cop + o0 + j * kLanes);
        if (interior && row_in) {  // every column in range: plain strided addresses
          const S* x0 = xrow + fprop_in_col(p, ow0, kw) * xs;
          for (int q = 0; q < NP; ++q)
            for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::load(x0 + q * p.sw * xs + j * kLanes), fv[j], a[q][j]);
          continue;
        }
        for (int q = 0; q < NP; ++q) {
          const i64 iw = fprop_in_col(p, ow0 + q, kw);
          // Padded taps are fma with +0, exactly as the contract says.
          const S* px = (row_in && iw >= 0 && iw < p.W) ? xrow + iw * xs : zeros;
          for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::load(px + j * kLanes), fv[j], a[q][j]);
        }
      }
    }
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = a[q][j];
  }

  // Depthwise column-sweep block for KW-wide filters (3, 5 or 7: dw_sweep_width; no width dilation),
  // stride SW: each input column is loaded once per row kh and used by every output that meets it.
  // Output q meets column c = q*SW + kw, so sweeping c upwards still gives each output its taps in kw
  // order. Interior blocks read every column; kClip blocks (a row's ends) read the columns inside the
  // row and fold +0 for the others, the padded taps' fmas (outputs past the row fold something, never
  // stored). Against the per-pixel block that row ends took before (AVX-512, batch 8, two threads, old
  // and new builds in alternating processes, ms): 3x3 19x19x728 2.47, 2.53 -> 1.99, 1.88; 112x112x32
  // 2.37, 2.75 -> 2.22, 2.28; 56x56x144 3.37, 3.07 -> 2.36, 2.63; 3x3/2 112x112x96 3.04, 3.65 -> 2.94, 2.82.
  template <int NP, int NW, int SW, int KW, class S, bool kClip = false>
  static inline __attribute__((always_inline)) void fprop_dw_sweep_block(Vec (&acc)[NP][NW], const ConvProblem& p,
                                                                         const Rows<S>& x, i64 xs, const T* wp, i64 cop,
                                                                         const S* zeros, i64 n, i64 oh, i64 ow0,
                                                                         i64 o0) {
    constexpr int NC = (NP - 1) * SW + KW;
    Vec a[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
    for (i64 kh = 0; kh < p.KH; ++kh) {
      const i64 ih = fprop_in_row(p, oh, kh);
      const bool row_in = ih >= 0 && ih < p.H;
      // A padded row is fmas with +0 (the contract): the zero vector, column stride 0.
      const S* xr = row_in ? x.row(n * p.H + ih) + o0 : zeros;
      const i64 col0 = fprop_in_col(p, ow0, 0), cs = row_in ? xs : 0;  // c = 0's input column
      const S* x0 = xr + (kClip ? 0 : col0 * cs);  // (clipped: formed for columns inside the row only)
      Vec fv[KW][NW];
      for (int kw = 0; kw < KW; ++kw)
        for (int j = 0; j < NW; ++j) fv[kw][j] = V::load(wp + (kh * KW + kw) * cop + o0 + j * kLanes);
#pragma GCC unroll 64
      for (int c = 0; c < NC; ++c) {
        for (int j = 0; j < NW; ++j) {
          Vec xv;
          if constexpr (kClip) {
            const i64 col = col0 + c;
            xv = row_in && col >= 0 && col < p.W ? V::load(xr + col * xs + j * kLanes) : V::zero();
          } else {
            xv = V::load(x0 + c * cs + j * kLanes);
          }
#pragma GCC unroll 7
          for (int kw = 0; kw < KW; ++kw) {
            const int d = c - kw;
            if (d >= 0 && d % SW == 0 && d / SW < NP) a[d / SW][j] = V::fma(xv, fv[kw][j], a[d / SW][j]);
          }
        }
      }
    }
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = a[q][j];
  }

  // Depthwise-like (Cg == 1): lanes over output channels across groups; lane o
  // reads input channel o / cog. Each fold is over (kh, kw) only. Blocks of
  // NW vectors; SW > 0: every block takes fprop_dw_sweep_block for KW-wide filters (clipped at the
  // row's ends). S: x's element type (Half16 only with cog == 1: see fprop_takes_half).
  template <int NP, int NW, int SW, class S = T, int KW = 3>
  static void fprop_dw(const ConvProblem& p, const Rows<S>& x, const T* f, const T* bias, const OutSpec& y,
                       const CpuExecutor& ex) {
    constexpr int BD = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.Co, BD), cop = nb * BD, khw = p.KH * p.KW;
    const LaneFilter lf(f, bias, khw, p.Co, cop);
    const std::vector<T>&wp = lf.w, &bp = lf.b;
    std::vector<S> xr;
    if constexpr (std::is_same<S, T>::value)
      if (cog > 1) xr = repeat_channels(p, x, cog);
    const Rows<S> xin = cog > 1 ? rows_of(xr, p.N * p.H, p.W * p.Co) : x;
    const std::vector<S> zeros(cop + kPad, S{});
    const i64 owb = ceil_div(p.OW, NP), units = p.N * p.OH * nb * owb;
    const SlicePrefetch prefetch(p.W * p.Co * sizeof(S), owb * nb);
    const bool stream = Base::streamable(y, p.y_elems());
    ex.parallel_for(units, khw * BD * NP, [&](i64 u0, i64 u1) {
      FpEnv guard;
      const BlockOut out(y, stream, bias ? bp.data() : nullptr);
      LineStage<NP, NW> lines(out, stream);
      // Channel blocks innermost: consecutive units read consecutive memory.
      InnerCounter c(u0, nb);
      i64 wb = 0, oh = 0, n = 0;
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          i64 rem = c.outer;
          wb = rem % owb; rem /= owb;
          oh = rem % p.OH; n = rem / p.OH;
        }
        const i64 b = c.inner, ow0 = wb * NP, o0 = b * BD;
        // The input rows the next output row adds, prefetched a slice per unit:
        // once a layer outgrows the cache this hides the memory latency.
        const i64 r0 = std::max<i64>(0, fprop_in_row(p, oh, p.KH - 1) + 1);
        const i64 r1 = std::min<i64>(p.H - 1, fprop_in_row(p, oh + 1, p.KH - 1));
        for (i64 r = r0; r <= r1; ++r)
          prefetch(xin.row(n * p.H + r), wb * nb + b);
        // Interior blocks: all NP outputs exist and every kw column is inside the row.
        const bool interior = ow0 + NP <= p.OW && fprop_in_col(p, ow0, 0) >= 0 &&
                              fprop_in_col(p, ow0 + NP - 1, p.KW - 1) < p.W;
        Vec acc[NP][NW];
        if constexpr (SW > 0) {
          const T* w = wp.data();
          if (interior) fprop_dw_sweep_block<NP, NW, SW, KW, S>(acc, p, xin, p.Co, w, cop, zeros.data(), n, oh, ow0, o0);
          else fprop_dw_sweep_block<NP, NW, SW, KW, S, true>(acc, p, xin, p.Co, w, cop, zeros.data(), n, oh, ow0, o0);
        } else {
          fprop_dw_block<NP, NW, S>(acc, p, xin, p.Co, wp.data(), cop, zeros.data(), n, oh, ow0, o0, interior);
        }
        // Blocks inside the row store straight from registers, fully unrolled (LineStage::put). Against
        // a loop bounded per pixel, batch 8, two threads, in one process, tf.nn alongside, ms: AVX2 3x3
        // 112x112x32 2.79 -> 2.37 (tf 2.28), 56x56x144 2.93 -> 2.75 (2.55), 3x3/2 112x112x96 2.72 -> 2.27
        // (1.91); AVX-512 2.27 -> 2.12, 2.37 -> 2.22, 2.86 -> 2.58; 5x5 and 7x7 within 5% either way.
        lines.put(out, acc, out.s.at(n, oh, ow0, o0), out.s.w, b, nb, o0, p.Co, 0, int(std::min<i64>(NP, p.OW - ow0)),
                  u + 1 == u1);
      }
      if (stream) V::fence();
    });
  }

  // Grouped layers with few output channels per group (grouped_lanes: Cog divides kLanes, Cg <= Cog;
  // ResNeXt's 32 groups of 4 + 4): lanes over output channels across groups, kLanes / Cog groups per
  // vector, as the depthwise blocks do, instead of one group's Cog channels in a block of BF lanes (4 of
  // 32 filled). Lane o folds (kh, kw, i) ascending over its group g = o / Cog; the x values it needs,
  // x[.., g*Cg + i], lie in one vector of the block's groups' input channels, which one lane permute per
  // i moves into place (V::permute). NP pixels x NW vectors; pixels past the row and padded taps read +0.
  template <int NP, int NW>
  static void fprop_grouped(const ConvProblem& p, const Rows<T>& x, const T* f, const T* bias, const OutSpec& y,
                            const CpuExecutor& ex) {
    constexpr int BD = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.Co, BD), cop = nb * BD, taps = p.KH * p.KW * p.Cg;
    const LaneFilter lf(f, bias, taps, p.Co, cop);  // [taps][cop]
    const std::vector<T>&wp = lf.w, &bp = lf.b;
    // idx[i][l]: where lane l's x value for input channel i lies in the vector of its groups' channels.
    const std::vector<std::int32_t> idx = Base::group_lane_table(cog, p.Cg, p.Cg, p.Cg);
    const std::vector<T> zeros(p.C + BD + kPad, T(0));  // a padded tap's (or a vector's past Co) x values
    const i64 owb = ceil_div(p.OW, NP), units = p.N * p.OH * nb * owb;
    const Strides4 ys = y.s;
    const bool stream = Base::streamable(y, p.y_elems());
    ex.parallel_for(units, taps * BD * NP, [&](i64 u0, i64 u1) {
      FpEnv guard;
      const BlockOut to(y, stream, bias ? bp.data() : nullptr);
      InnerCounter c(u0, nb);  // channel blocks innermost: they share the block's input pixels
      i64 wb = 0, oh = 0, n = 0;
      for (i64 u = u0; u < u1; ++u, c.next()) {
        if (u == u0 || c.inner == 0) {
          i64 rem = c.outer;
          wb = rem % owb; rem /= owb;
          oh = rem % p.OH; n = rem / p.OH;
        }
        const i64 ow0 = wb * NP, o0 = c.inner * BD;
        i64 xoff[NW];  // vector j's first input channel, its groups' first
        bool real[NW];
        for (int j = 0; j < NW; ++j) {
          real[j] = o0 + j * kLanes < p.Co;
          xoff[j] = real[j] ? (o0 + j * kLanes) / cog * p.Cg : 0;
        }
        const bool interior = ow0 + NP <= p.OW && fprop_in_col(p, ow0, 0) >= 0 &&
                              fprop_in_col(p, ow0 + NP - 1, p.KW - 1) < p.W;
        Vec a[NP][NW];
        for (int q = 0; q < NP; ++q)
          for (int j = 0; j < NW; ++j) a[q][j] = V::zero();
        for (i64 kh = 0; kh < p.KH; ++kh) {
          const i64 ih = fprop_in_row(p, oh, kh);
          const bool row_in = ih >= 0 && ih < p.H;
          const T* xrow = row_in ? x.row(n * p.H + ih) : nullptr;
          for (i64 kw = 0; kw < p.KW; ++kw) {
            Vec xv[NP][NW];
            for (int q = 0; q < NP; ++q) {
              const T* px = zeros.data();
              if (row_in) {
                const i64 iw = fprop_in_col(p, ow0 + q, kw);
                if (interior || (ow0 + q < p.OW && iw >= 0 && iw < p.W)) px = xrow + iw * p.C;
              }
              for (int j = 0; j < NW; ++j) xv[q][j] = V::load((real[j] ? px : zeros.data()) + xoff[j]);
            }
            const T* wt = wp.data() + (kh * p.KW + kw) * p.Cg * cop + o0;
            for (i64 i = 0; i < p.Cg; ++i) {
              const typename V::P pi = V::perm_index(idx.data() + i * kLanes);
              Vec fv[NW];
              for (int j = 0; j < NW; ++j) fv[j] = V::load(wt + i * cop + j * kLanes);
              for (int q = 0; q < NP; ++q)
                for (int j = 0; j < NW; ++j) a[q][j] = V::fma(V::permute(xv[q][j], pi), fv[j], a[q][j]);
            }
          }
        }
        for (int q = 0; q < NP; ++q) {
          if (ow0 + q >= p.OW) continue;
          const i64 off = ys.at(n, oh, ow0 + q, o0);
          for (int j = 0; j < NW; ++j) to.put(a[q][j], off + j * kLanes * ys.c, o0 + j * kLanes, p.Co);
        }
      }
      if (stream) V::fence();
    });
  }

  // Depthwise filters of a dw_sweep_width, width stride 1 or 2: blocks of fprop_dw_sweep_block
  // (dw_sweep_pixels, or 6 at stride 2). 5- and 7-wide filters took the per-pixel block (fprop_dw_block:
  // a load per fma) before; against it, batch 8, two threads, in one process, medians, ms: AVX-512 5x5/2
  // 56x56x144 1.92 -> 1.73, 5x5 28x28x240 2.42 -> 1.83, 14x14x672 1.76 -> 1.20, 7x7 56x56x96 5.03 -> 2.63;
  // AVX2 2.56 -> 2.37, 3.31 -> 3.09, 2.79 -> 2.05, 7.93 -> 5.17 (8-pixel blocks then).
  template <class S>
  static bool fprop_dw_sweep(const ConvProblem& p, const Rows<S>& x, const T* f, const T* bias, const OutSpec& y,
                             const CpuExecutor& ex) {
    if (!Base::dw_sweeps(p)) return false;
    with_dw_sweep_width(p.KW, [&](auto kw_c) {
      constexpr int KW = decltype(kw_c)::value, NW = dw_sweep_vectors(KW);
      if (p.sw == 1) fprop_dw<dw_sweep_pixels(KW), NW, 1, S, KW>(p, x, f, bias, y, ex);
      else fprop_dw<6 / NW, NW, 2, S, KW>(p, x, f, bias, y, ex);
    });
    return true;
  }

  // 1x1 problems that take the GEMM (fprop_gemm) in fprop below.
  static bool gemm(const ConvProblem& p) {
    return !Base::depthwise(p) && Base::flat_pixels(p) && p.G == 1 &&
           (wide_gemm(p) || Base::PG > Base::PF || p.filter_elems() * i64(sizeof(T)) > Base::kFilterL2Bytes);
  }

  // Depthwise problems fprop_dw_sweep takes with x read in place as float16 (one output channel per group:
  // no repeated channels). Once 3x3 only; the 5- and 7-wide sweeps widened x into a float copy first
  // (AVX2, AMD Zen 4, batch 8, two threads, float16 against our float32: 5x5 28x28x240 forward 0.61).
  static bool dw_sweep_half(const ConvProblem& p) {
    return Base::depthwise(p) && p.Cog() == 1 && Base::dw_sweeps(p);
  }

  // float16 x read in place: fprop_takes_half (kernels_impl.h) chose this problem, a 1x1 GEMM or a
  // depthwise sweep (dw_sweep_half).
  static void fprop_half(const ConvProblem& p, const Rows<Half16>& x, const T* f, const T* bias, const OutSpec& y,
                         const CpuExecutor& ex) {
    if (gemm(p)) fprop_gemm<Half16>(p, x, f, bias, y, ex);
    else fprop_dw_sweep<Half16>(p, x, f, bias, y, ex);
  }

  static void fprop(const ConvProblem& p, const Rows<T>& x, const T* f, const T* bias, const OutSpec& y,
                    const CpuExecutor& ex) {
    if (Base::depthwise(p)) {
      if (!fprop_dw_sweep<T>(p, x, f, bias, y, ex)) fprop_dw<PW, NV, 0>(p, x, f, bias, y, ex);
    } else if (Base::grouped_lanes(p)) {
      // Batch 8, two threads, in one process, medians, ms, against the dense blocks of one group: 3x3
      // 56x56 128->128 in 32 groups (4 + 4) AVX-512 27.7 -> 8.2 (through TensorFlow's op; TensorFlow
      // 6.6-7.2), AVX2 20.3 -> 10.3; 56x56 64->64 in 32 groups (2 + 2) AVX2 17.1 -> 3.5; 28x28 256->256
      // in 32 groups (8 + 8) AVX-512 10.6 -> 6.4.
      // Blocks of 4 pixels x 2 vectors against PW x 1 (whole 128-byte lines of each output pixel on
      // AVX-512), three runs: 56x56 128->128 in 32 groups 6.34 -> 5.19, 7.69 -> 6.30, 10.08 -> 8.24; 28x28
      // 256->256 4.22 -> 3.50, 5.41 -> 4.96, 6.74 -> 4.29; AVX2 56x56 13.09 -> 10.14 (6 x 2 and 4 x 4: even
      // or slower, 4 x 4 spills).
      fprop_grouped<4, 2>(p, x, f, bias, y, ex);
    } else if (p.G > 1 && p.Cog() <= kLanes) {
      // One vector of output channels per block where a group has no more (NV vectors left the rest
      // empty): 3x3 14x14 512->512 in 32 groups (16 + 16) AVX-512 3.91 -> 3.02 ms; 28x28 256->256 in 32
      // groups AVX2 10.2 -> 8.6 (batch 8, two threads, in one process, medians; 16 pixels: 3.39, 9.54).
      // Rows of 14 (28, 56, 112) in 14-pixel blocks where 14 accumulators fit: 8-pixel blocks made every block
      // of a 14-pixel row an edge block and ran 2 of 16 pixels past it. AVX-512, batch 8, two threads,
      // alternating in one process, ms: 3x3 14x14 512->512 in 32 groups 2.91 -> 2.69 (an earlier run, 8, 7
      // and 14 pixels: 3.18, 3.00, 2.77), 28x28 512->512 in 32 groups 13.30 -> 11.67, 14x14 1024->1024 in 64
      // groups 6.10 -> 5.60; float16 inputs 14x14 3.63 -> 3.24, native float16 9.36 -> 8.94 (28x28 even).
      // Rows that 8-pixel blocks fit as well, two runs: 56x56 256->256 in 16 groups 25.78, 26.44 -> 27.42,
      // 23.07; 56x56 512->512 in 32 groups 54.79, 53.57 -> 52.83, 49.21; 112x112 128->128 in 8 groups
      // 47.02, 64.95 -> 45.36, 59.30.
      if constexpr (Base::PF == 8) {
        if (p.OW % 14 == 0) return fprop_dense<14, 1>(p, x, f, bias, y, ex);
      }
      fprop_dense<Base::PF, 1>(p, x, f, bias, y, ex);
    } else if (gemm(p)) {
      // Where its register block is the larger one (AVX2: 6x2 against 4x2; batch 8, two threads, in one
      // process: 1x1 56x56 256->64 6.51 -> 5.83 ms, 64->256 6.94 -> 6.14, 28x28 512->128 5.98 -> 5.12;
      // AVX-512: its 7x4 GEMM tile, against the 7x4 dense tile, Intel Xeon: 56x56 256->64 2.94 -> 2.81,
      // 64->256 3.25 -> 3.06, 14x14 1024->256 2.64 -> 2.61), or the filter is past L2 (AVX2: 1x1 7x7x2048
      // 0.69 -> 0.85 of oneDNN).
      fprop_gemm(p, x, f, bias, y, ex);
    } else if (Base::kWideFwd && Base::fills_blocks(p.Cog(), Base::WideTile::kFwd[1] * kLanes)) {
      // Groups of whole 4-vector channel blocks: the ISA's wide forward tile (past L2, with the memory
      // tile). Batch 8, two threads, in one process (ms):
      //   AVX-512 (AMD Zen 4), 4x4 against 8x2 or 7x2: C3D 3x3x3 block 95.0 -> 93.8, 3x3 56x56x64 9.06 ->
      //   8.83, 7x7x512 8.96 -> 8.79, 112x112 32->64 17.73 -> 17.64, stem 7x7/2 12.05 -> 11.03, 1x1 56x56
      //   256->64 4.81 -> 4.68, 64->256 5.01 -> 4.74, 14x14 1024->256 4.19 -> 4.12;
      //   AVX-512 (Intel Xeon, two 512-bit fma ports: 4x4's four filter loads per 16 fmas came from L2 at
      //   32 bytes a cycle), 7x4 against 4x4: C3D block 63.5 -> 58.4, 3x3 56x56x64 5.95 -> 5.40, 28x28x128
      //   5.98 -> 5.27, 19x19x128 2.94 -> 2.53, 112x112 32->64 11.92 -> 11.01; 14x14x256 and 7x7x512
      //   (7x4 already: past L2) even; ending rows in narrower blocks instead of running the last 7 past
      //   the row: even at 19 wide, 2-3% slower at 56 and 28 (1x1 layers now take the GEMM above);
      //   AVX2, 3x4 against 6x2 (12 chains both): C3D block 99.6 -> 97.2, 3x3 56x56x64 9.36 -> 8.94,
      //   28x28x128 9.09 -> 8.82, 14x14x256 8.91 -> 8.67, 7x7x512 11.03 -> 8.85, 112x112 19.25 -> 18.80.
      // Where that block's packed filter is past L2 but the narrower kFwdPastL2 tile's is not, and rows are
      // whole blocks of it, that tile in registers instead of the memory tile (AVX-512 14x2, Intel Xeon:
      // 3x3 14x14x256 5.45 -> 5.11, 5.59 -> 5.15, 5.68 -> 5.38 ms; 28x28 256->256 stride 2 even; 7x7x512
      // left alone: half of each 14-pixel block would run past the row).
      if constexpr (Base::kWideFwd) {  // (ISAs without the tile never instantiate it)
        constexpr int NP = Base::WideTile::kFwd[0], NW = Base::WideTile::kFwd[1];
        constexpr int HP = Base::WideTile::kFwdPastL2[0], HW = Base::WideTile::kFwdPastL2[1];
        const i64 taps = p.KH * p.KW * p.Cg;
        if constexpr (HP > 0) {
          if (!Base::filter_block_in_l2(taps, NW * kLanes) && Base::filter_block_in_l2(taps, HW * kLanes) &&
              p.OW % HP == 0) {
            fprop_dense<HP, HW>(p, x, f, bias, y, ex);
            return;
          }
        }
        fprop_dense<NP, NW>(p, x, f, bias, y, ex);
      }
    } else if (Base::tail_blocks(p.OW)) {  // AVX2: 6-pixel blocks, narrower ones ending each row
      if constexpr (Base::PG > Base::PF) fprop_dense<Base::PG, NV, Base::kTailMin>(p, x, f, bias, y, ex);
    } else if (Base::sevens(p.OW, Base::PF)) {
      fprop_dense<7, NV>(p, x, f, bias, y, ex);  // 7x7, 14x14, 28x28: whole blocks (measured: 3x3 7x7x512 +12%)
    } else if (Base::PG > Base::PF) {
      // AVX2, rows that whole 6-pixel blocks overrun by at most 1/16 (the others: tail_blocks above): the
      // GEMM's 6-pixel blocks (12 fma chains instead of 8). In one process, batch 8, two threads (three
      // runs): stem 7x7/2 224 15.05 -> 13.91, 18.17 -> 17.69, 17.60 -> 16.39 ms; 3x3 56x56x64 11.94 ->
      // 10.94, 9.92 -> 10.14, 12.37 -> 11.58; 112x112 32->64 26.1 -> 22.6; 28x28 unchanged.
      fprop_dense<Base::PG, NV>(p, x, f, bias, y, ex);
    } else {
      fprop_dense<Base::PF, NV>(p, x, f, bias, y, ex);
    }
  }

};
