// Filter and bias gradients (dw, db): chunk parts folded per the contract's
// shape-only chunks, then combined in chunk order. Part of the kernels of one
// ISA (kernels_impl.h); shared pieces in kernels_base.h.

template <class V>
struct WgradKernels : KernelBase<V> {
  DETCONV_KERNEL_BASE_NAMES

  // A second dense dw tile shape for wide groups, where the ISA names one.
  static constexpr int WI = Base::kWideDw ? Base::WideTile::kDw[0] : TI, WW = Base::kWideDw ? Base::WideTile::kDw[1] : NV;

  // Stores the first n (<= kLanes: only those) lanes of v to dst; tmp is scratch.
  static void store_lanes(T* dst, Vec v, i64 n, T* tmp) {
    if (n >= kLanes) {
      V::store(dst, v);
      return;
    }
    V::store(tmp, v);
    for (i64 l = 0; l < n; ++l) dst[l] = tmp[l];
  }

  // Adds the ch.P chunk parts of every element in chunk order and rounds once.
  // A unit is EV vectors of elements: each part's slice of them is one
  // contiguous run (a page), not P scattered vectors per element vector.
  static void combine(const Chunks& ch, i64 F, const T* parts, const OutSpec& out, const CpuExecutor& ex) {
    constexpr int EV = 16;
    const i64 units = ceil_div(F, EV * kLanes);
    ex.parallel_for(units, ch.P * EV * kLanes, [&](i64 u0, i64 u1) {
      FpEnv guard;
      for (i64 u = u0; u < u1; ++u) {
        const i64 e0 = u * EV * kLanes, nv = std::min<i64>(EV, ceil_div(F - e0, kLanes));
        Vec s[EV];
        for (int v = 0; v < EV; ++v)
          if (v < nv) s[v] = V::load(parts + e0 + v * kLanes);  // parts is padded by kPad
        for (i64 k = 1; k < ch.P; ++k) {
          const T* pk = parts + k * F + e0;
          for (int v = 0; v < EV; ++v)
            if (v < nv) s[v] = V::add(s[v], V::load(pk + v * kLanes));
        }
        for (int v = 0; v < EV; ++v)
          if (v < nv) put_lanes(out, s[v], e0 + v * kLanes, 1, F - e0 - v * kLanes);
      }
    });
  }

  // Where a tile's chunk-k fold goes. Parts: its own slot of part k, added
  // up by combine() afterwards. Running: one F-element sum that each tile
  // folds its chunks into as it goes, k ascending in one thread, so
  // s = ((part0 + part1) + part2) + ... exactly as combine() adds them,
  // without writing P parts to memory and reading them back.
  struct PartSink {
    T* base;
    i64 F;
    bool running;
    i64 shares;      // running: tiles split into this many fixed shares
    i64 last;        // running: the last chunk, whose sum is the result ...
    const OutSpec* out;  // ... rounded straight into out (no combine() pass)
    void put(i64 k, i64 e, Vec v, i64 n, T* tmp) const {
      if (!running) {
        store_lanes(base + k * F + e, v, n, tmp);
        return;
      }
      T* dst = base + e;
      Vec s = v;
      if (k > 0 && n >= kLanes) {
        s = V::add(V::load(dst), v);
      } else if (k > 0) {  // lanes past n belong to another tile (maybe another thread's): never touched
        for (i64 l = 0; l < n; ++l) tmp[l] = dst[l];
        s = V::add(V::load(tmp), v);  // V's add: native float16 rounds it to binary16
      }
      if (k == last) put_lanes(*out, s, e, 1, n);
      else store_lanes(dst, s, n, tmp);
    }
    // put() for a tile: acc[t][j] goes to elements e0 + t*ld + j*kLanes, rows t < `rows`, the first `lanes`
    // lanes of each row. A running sum's middle chunks with every lane live take one pointer and no test
    // per vector, the same load, add and store per element: put() per vector recomputed its address and
    // tests for each (AVX2, batch 8, two threads, in one process, ms: 1x1 56x56 64->256 dw 11.58 ->
    // 9.94, 11.65 -> 9.88; 256->64 11.85 -> 10.30, 12.97 -> 10.12; 3x3 14x14 256->256 16.08 -> 16.01).
    template <int NI, int NW>
    void put_tile(i64 k, i64 e0, i64 ld, const Vec (&acc)[NI][NW], i64 rows, i64 lanes, T* tmp) const {
      if (running && k > 0 && k != last && rows >= NI && lanes >= NW * kLanes) {
        T* d = base + e0;
        for (int t = 0; t < NI; ++t, d += ld)
          for (int j = 0; j < NW; ++j) V::store(d + j * kLanes, V::add(V::load(d + j * kLanes), acc[t][j]));
        return;
      }
      for (int t = 0; t < NI; ++t)
        for (int j = 0; j < NW; ++j)
          if (t < rows) put(k, e0 + t * ld + j * kLanes, acc[t][j], lanes - j * kLanes, tmp);
    }
  };

  // Runs unit(u0, u1) over the units u = k*tiles + t (chunk k, tile t).
  // Parts: any split. Running: sink.shares fixed shares of the tiles, each
  // taken through every chunk in order (a tile's chunks never leave its
  // thread).
  template <class Unit>
  static void for_chunk_tiles(const Chunks& ch, i64 tiles, i64 cost, const PartSink& sink, const CpuExecutor& ex,
                              Unit&& unit) {
    if (!sink.running) {
      ex.parallel_for(ch.P * tiles, cost, unit);
      return;
    }
    const i64 shares = std::max<i64>(1, std::min<i64>(tiles, sink.shares));
    ex.parallel_for(shares, cost * ch.P * ceil_div(tiles, shares), [&](i64 s0, i64 s1) {
      const i64 t0 = s0 * tiles / shares, t1 = s1 * tiles / shares;
      for (i64 k = 0; k < ch.P; ++k) unit(k * tiles + t0, k * tiles + t1);
    });
  }

  // Every share reads all of a chunk's x and dy rows: two shares per thread
  // where they stay in the shared cache, so that a thread held up (by the
  // pool's other work, or the machine's) leaves a share to the others; one
  // where they do not (1x1 56x56 64->256, 32 MB: 6.5 ms in 2 shares, 8.1 ms
  // in 4; 3x3 14x14 256->256, 3 MB: medians 12.0 and 9.9 ms, TensorFlow's
  // ops between calls).
  static i64 running_shares(const ConvProblem& p, int threads) {
    return in_shared_cache(p) ? 2 * i64(threads) : i64(threads);
  }
  // Whether x and dy (as accumulator values) stay in the shared cache: 16 MiB.
  static bool in_shared_cache(const ConvProblem& p) { return p.R() * position_bytes(p) <= (i64(16) << 20); }
  // The bytes of one position's x and dy values (one pixel each) as accumulator values.
  static i64 position_bytes(const ConvProblem& p) { return (p.C + p.Co) * i64(sizeof(T)); }

  // Running sums where the parts' round trip through memory (P*F written,
  // then read by combine) costs more than the extra x and dy reads (every
  // share but one reads all of them again, mostly from the shared cache).
  // The last chunk's sums go straight to dw, so even 2 chunks gain (3x3 7x7
  // 512->512 dw, AVX-512: 10.77 -> 10.32 ms; AVX2 12.47 -> 11.71).
  static bool running_sums(const ConvProblem& p, const Chunks& ch, i64 F, int threads) {
    return ch.P > 1 && (threads - 1) * p.R() * (p.C + p.Co) <= 2 * ch.P * F;
  }

  static constexpr i64 kAheadR = 8;  // dy pixels prefetched ahead in dw folds

  // A run of n positions whose x is +0 (padding) applies fma(+0, dy, acc) to
  // every accumulator of a tile. Its effect on each is one fma(+0, z, acc),
  // z the run's own fold of fma(+0, dy, .) from -0 (PaddedRun in
  // detconv/numerics.h, in vectors): NW fmas per position instead of NI*NW.
  template <int NI, int NW>
  static inline __attribute__((always_inline)) void fold_padded_run(Vec (&a)[NI][NW], const T* dyr, i64 Co, i64 n) {
    if (n <= 0) return;
    Vec z[NW];
    for (int j = 0; j < NW; ++j) z[j] = V::bcast(T(-0.0));
    for (i64 e = 0; e < n; ++e)
      for (int j = 0; j < NW; ++j) z[j] = V::fma(V::zero(), V::load(dyr + e * Co + j * kLanes), z[j]);
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = V::fma(V::zero(), z[j], a[t][j]);
  }

  // Of seg positions from output column ow whose tap reads input row ih, those [lo, hi) that meet a column
  // inside the row: outputs [first, end) do at the tap's kw (fprop_first_out, fprop_end_out, the caller's
  // once per tile); none in a padded row. Out-parameters: returning a pair moved GCC's register choices in
  // the 16-bit folds (objdump), these keep every fold loop's code as it was.
  static inline __attribute__((always_inline)) void segment_span(const ConvProblem& p, i64 ih, i64 ow, i64 seg,
                                                                 i64 first, i64 end, i64& lo, i64& hi) {
    lo = seg, hi = seg;
    if (ih >= 0 && ih < p.H) {
      lo = std::min(seg, std::max<i64>(0, first - ow));
      hi = std::max(lo, std::min(seg, end - ow));
    }
  }

  // One output row segment of a dense dw tile's fold: seg positions from
  // (n, oh, ow). Outputs [first, end) meet a column inside the row at tap kw
  // (fprop_first_out, fprop_end_out: the caller's, once per tile, not two
  // divisions per segment), so positions [lo, hi) do; the runs before and
  // after them (and whole padded rows) read +0 and take one fma each
  // (fold_padded_run).
  template <int NI, int NW>
  static inline __attribute__((always_inline)) void fold_segment(Vec (&a)[NI][NW], const ConvProblem& p, i64 n,
                                                                 i64 oh, i64 ow, i64 seg, i64 kh, i64 kw, i64 first,
                                                                 i64 end, const Rows<T>& x, i64 xoff,
                                                                 const Rows<T>& dy, i64 dyoff) {
    const i64 ih = fprop_in_row(p, oh, kh), iw0 = fprop_in_col(p, ow, kw);
    const T* dyr = dy.row(n * p.OH + oh) + ow * p.Co + dyoff;
    i64 lo, hi;
    segment_span(p, ih, ow, seg, first, end, lo, hi);
    fold_padded_run<NI, NW>(a, dyr, p.Co, lo);  // the run before [lo, hi) (a padded row: all of it)
    if (hi > lo) {
      const T* xp = x.row(n * p.H + ih) + xoff + (iw0 + lo * p.sw) * p.C;
      const T* d = dyr + lo * p.Co;
      for (i64 e = lo; e < hi; ++e, xp += p.sw * p.C, d += p.Co) {
        __builtin_prefetch(d + kAheadR * p.Co);  // dy strides by whole pixels: ahead of the hardware
        Vec dv[NW];
        for (int j = 0; j < NW; ++j) dv[j] = V::load(d + j * kLanes);
        for (int t = 0; t < NI; ++t) {
          const Vec xv = V::bcast(xp[t]);
          for (int j = 0; j < NW; ++j) a[t][j] = V::fma(xv, dv[j], a[t][j]);
        }
      }
    }
    fold_padded_run<NI, NW>(a, dyr + hi * p.Co, p.Co, seg - hi);  // the run after
  }

  // Chunk k's output row segments, r ascending: fn(n, oh, ow, seg) for seg positions from (n, oh, ow);
  // one division for the chunk, none per segment. Lambdas on a fold's path are marked always_inline:
  // pack_x's, left to GCC, took the AVX-512 stem filter gradient from 16 to 25 ms (two threads,
  // alternating processes), though AVX2's instruction count did not move.
  template <class Fn>
  static inline __attribute__((always_inline)) void row_segments(const ConvProblem& p, const Chunks& ch, i64 k,
                                                                 Fn&& fn) {
    i64 n, oh, ow;
    split_r(p, ch.begin(k), n, oh, ow);
    for (i64 r = ch.begin(k), end = ch.end(k); r < end; ow = 0, oh = oh + 1 == p.OH ? 0 : oh + 1, n += oh == 0) {
      const i64 seg = std::min(end - r, p.OW - ow);
      fn(n, oh, ow, seg);
      r += seg;
    }
  }

  // The r loop of one dense dw tile, on private accumulators (see micro()),
  // one output row segment at a time.
  template <int NI, int NW>
  static inline __attribute__((always_inline)) void wgrad_dense_fold(Vec (&acc)[NI][NW], const ConvProblem& p,
                                                                     const Chunks& ch, i64 k, i64 kh, i64 kw,
                                                                     const Rows<T>& x, i64 xoff, const Rows<T>& dy,
                                                                     i64 dyoff) {
    Vec a[NI][NW];
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = V::zero();
    // r ascending; divisions for the chunk and the tap, none per segment.
    const i64 first_out = fprop_first_out(p, kw), end_out = fprop_end_out(p, kw);
    row_segments(p, ch, k, [&](i64 n, i64 oh, i64 ow, i64 seg) __attribute__((always_inline)) {
      fold_segment<NI, NW>(a, p, n, oh, ow, seg, kh, kw, first_out, end_out, x, xoff, dy, dyoff);
    });
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) acc[t][j] = a[t][j];
  }

  // dy_runs (below) for a flat_pixels (KernelBase) problem's x and dy together: fn(e, xp,
  // dyp, n), x pixels at xp (stride C).
  template <class Fn>
  static void flat_runs(const ConvProblem& p, const Chunks& ch, i64 k, const Rows<T>& x, const Rows<T>& dy, Fn&& fn) {
    const i64 begin = ch.begin(k), end = ch.end(k);
    i64 r = begin;
    if (!x.table && !dy.table) {
      const i64 flat_end = std::min(end, std::min(x.last * p.W, dy.last * p.OW));
      if (flat_end > r) fn(i64(0), x.base + r * p.C, dy.base + r * p.Co, flat_end - r);
      r = std::max(r, flat_end);
    }
    while (r < end) {  // then one row at a time
      const i64 row = r / p.OW, ow = r % p.OW, seg = std::min(end - r, p.OW - ow);
      fn(r - begin, x.row(row) + ow * p.C, dy.row(row) + ow * p.Co, seg);
      r += seg;
    }
  }

  // Calls fn(e, d, n) for chunk k's positions in runs whose dy pixels are
  // contiguous from d (stride Co), r ascending, e = r - begin: rows before
  // dy's last row (a copy, in Rows) follow each other.
  template <class Fn>
  static void dy_runs(const ConvProblem& p, const Chunks& ch, i64 k, const Rows<T>& dy, Fn&& fn) {
    const i64 begin = ch.begin(k), end = ch.end(k);
    i64 r = begin;
    if (!dy.table) {
      const i64 flat_end = std::min(end, dy.last * p.OW);
      if (flat_end > r) fn(i64(0), dy.base + r * p.Co, flat_end - r);
      r = std::max(r, flat_end);
    }
    while (r < end) {  // then one row at a time
      const i64 row = r / p.OW, ow = r % p.OW, seg = std::min(end - r, p.OW - ow);
      fn(r - begin, dy.row(row) + ow * p.Co, seg);
      r += seg;
    }
  }

  // The filter elements (kh, kw[t], i[t]) of a dense dw tile's NI rows, t <
  // n: NI channels of one tap, or, with `joint` (one group, no width
  // dilation, fewer channels than NI: stems), NI consecutive (kw, i) pairs of
  // one filter row, which would otherwise leave most of each tile past Cg.
  // Row t's x sits off[t] elements past its position's column-0 pixel.
  template <int NI, bool joint>
  struct TileRows {
    i64 kw[NI], i[NI], off[NI], kw_lo, kw_hi;
    int n = 0;
    bool contiguous = true;  // off[t] == off[0] + t: a position's NI values are one run of x
    TileRows() = default;
    TileRows(const ConvProblem& p, i64 kw0, i64 bi) {
      const i64 j0 = bi * NI, count = joint ? p.KW * p.Cg : p.Cg;
      for (int t = 0; t < NI; ++t) {
        const i64 j = std::min(j0 + t, count - 1);  // rows past the end repeat the last (never stored)
        kw[t] = joint ? j / p.Cg : kw0;
        i[t] = joint ? j % p.Cg : j;
        off[t] = kw[t] * p.dw * p.C + i[t];
        n += j0 + t < count;
        contiguous = contiguous && off[t] == off[0] + t;
      }
      kw_lo = kw[0];
      kw_hi = kw[NI - 1];
    }
  };

  // Chunk k's x for filter row kh and the tile rows `rows` (channels from
  // xoff), packed xp[e*NI + t] (e = r - begin): +0 at padded positions (the
  // contract folds them as fma(+0, dy, acc), here literally). One stream for
  // the tile, where x's own pixels (a power-of-two stride apart) would share
  // a few L1 sets, and no per-row set-up in the fold.
  template <int NI, bool joint>
  static void pack_x(const ConvProblem& p, const Chunks& ch, i64 k, i64 kh, const TileRows<NI, joint>& rows,
                     const Rows<T>& x, i64 xoff, T* xp) {
    row_segments(p, ch, k, [&](i64 n, i64 oh, i64 ow, i64 seg) __attribute__((always_inline)) {
      xp = pack_segment<NI, joint>(p, n, oh, ow, seg, kh, rows, x, xoff, xp);
    });
  }

  // pack_x for one output row segment: seg positions from (n, oh, ow); returns the end of what it wrote.
  template <int NI, bool joint>
  static T* pack_segment(const ConvProblem& p, i64 n, i64 oh, i64 ow, i64 seg, i64 kh,
                         const TileRows<NI, joint>& rows, const Rows<T>& x, i64 xoff, T* xp) {
    const i64 ih = fprop_in_row(p, oh, kh), c0 = fprop_in_col(p, ow, 0);
    const T* xr = ih >= 0 && ih < p.H ? x.row(n * p.H + ih) + xoff : nullptr;
    for (i64 e = 0; e < seg; ++e, xp += NI) {
      const i64 c = c0 + e * p.sw;  // column of tap 0
      if (xr && c + rows.kw_lo * p.dw >= 0 && c + rows.kw_hi * p.dw < p.W) {
        const T* src = xr + c * p.C;
        // A stem's (kw, i) pairs are one run of x: one vector copy instead of NI scalar ones (one process,
        // batch 8, two threads: stem 7x7/2 224 filter gradient AVX-512 16.25 -> 15.24 ms and 16.10 -> 15.05,
        // AVX2 17.42 -> 16.27).
        if (rows.contiguous) std::memcpy(xp, src + rows.off[0], NI * sizeof(T));
        else
          for (int t = 0; t < NI; ++t) xp[t] = src[rows.off[t]];
      } else {
        for (int t = 0; t < NI; ++t) {
          const i64 iw = c + rows.kw[t] * p.dw;
          xp[t] = xr && iw >= 0 && iw < p.W ? xr[iw * p.C + rows.i[t]] : T(0);
        }
      }
    }
    return xp;
  }

  // The fold of a joint tile whose pairs are one run of x (TileRows::contiguous: stems), x read in place
  // rather than packed: a position's NI values start at its column-0 pixel + off[0], positions sw*C apart.
  // Positions whose taps meet the row's padding fold the values pack_segment would have packed (+0 there;
  // gathered into `edge`, seg * NI values), rows outside x fold +0 (fold_padded_run): the same fmas as the
  // packed fold, r ascending. Not inlined, and one fold_run site for the three runs of a row: the
  // accumulators then stay in registers (in the tile's loop, beside the packed fold, GCC kept 7 of 28 on
  // the stack).
  template <int NI, int NW>
  static __attribute__((noinline)) void wgrad_joint_fold(Vec (&acc)[NI][NW], const ConvProblem& p, const Chunks& ch,
                                                        i64 k, i64 kh, const TileRows<NI, true>& rows,
                                                        const Rows<T>& x, const Rows<T>& dy, i64 dyoff, T* edge) {
    Vec a[NI][NW];
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = V::zero();
    // Outputs [first, end) meet columns inside the row at every pair (from its first and its last kw).
    const i64 first = fprop_first_out(p, rows.kw_lo), end = fprop_end_out(p, rows.kw_hi);
    row_segments(p, ch, k, [&](i64 n, i64 oh, i64 ow, i64 seg) __attribute__((always_inline)) {
      const i64 ih = fprop_in_row(p, oh, kh), c0 = fprop_in_col(p, ow, 0);
      const T* dyr = dy.row(n * p.OH + oh) + ow * p.Co + dyoff;
      if (ih < 0 || ih >= p.H) return fold_padded_run<NI, NW>(a, dyr, p.Co, seg);
      const T* xr = x.row(n * p.H + ih);
      i64 lo, hi;  // [lo, hi): every pair's column inside the row
      segment_span(p, ih, ow, seg, first, end, lo, hi);
      T* ep = edge;
      auto gather = [&](i64 e) __attribute__((always_inline)) {
        for (int t = 0; t < NI; ++t, ++ep) {
          const i64 iw = c0 + e * p.sw + rows.kw[t] * p.dw;
          *ep = iw >= 0 && iw < p.W ? xr[iw * p.C + rows.i[t]] : T(0);
        }
      };
      for (i64 e = 0; e < lo; ++e) gather(e);
      for (i64 e = hi; e < seg; ++e) gather(e);
      const T* xs[3] = {edge, hi > lo ? xr + (c0 + lo * p.sw) * p.C + rows.off[0] : edge, edge + lo * NI};
      const i64 steps[3] = {NI, p.sw * p.C, NI}, starts[3] = {0, lo, hi}, ends[3] = {lo, hi, seg};
#pragma GCC unroll 1
      for (int q = 0; q < 3; ++q)
        if (ends[q] > starts[q]) fold_run<NI, NW>(a, xs[q], steps[q], dyr + starts[q] * p.Co, p.Co, ends[q] - starts[q]);
    });
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) acc[t][j] = a[t][j];
  }

  // n positions of a tile's fold: x at xq (stride xstep), dy at d (stride Co).
  // PX: x read in place (flat_pixels), its positions C values apart, prefetched as dy is (1024 channels:
  // a 4 KiB page per position, which the hardware prefetchers do not cross). Batch 32, two threads, in
  // one process, ms: 1x1 14x14 1024->256 46.6 -> 34.5, 56x56 256->64 44.1 -> 39.9; batch 8: 56x56
  // 256->64 7.48 -> 6.58, 64->256 and 14x14 even.
  // The loop runs on a private copy of a (copied in and out once per run), as micro() does: a caller's
  // accumulators reached by reference (a lambda's capture) would otherwise have an address inside the
  // loop, and the __may_alias__ vector types made GCC store every one of them each step (AVX2's 6x2 loop
  // in wgrad_run_fold: 13 stack accesses per 12 fmas, 3x3 28x28 128->128 dw at 0.55-0.60 of oneDNN on
  // an Intel Xeon).
  template <int NI, int NW, bool PX = false>
  static inline __attribute__((always_inline)) void fold_run(Vec (&a)[NI][NW], const T* xq, i64 xstep, const T* d,
                                                             i64 Co, i64 n) {
    Vec r[NI][NW];
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) r[t][j] = a[t][j];
    for (i64 e = 0; e < n; ++e, xq += xstep, d += Co) {
      __builtin_prefetch(d + kAheadR * Co);
      if constexpr (PX) __builtin_prefetch(xq + kAheadR * xstep);
      Vec dv[NW];
      for (int j = 0; j < NW; ++j) dv[j] = V::load(d + j * kLanes);
      for (int t = 0; t < NI; ++t) {
        const Vec xv = V::bcast(xq[t]);
        for (int j = 0; j < NW; ++j) r[t][j] = V::fma(xv, dv[j], r[t][j]);
      }
    }
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = r[t][j];
  }

  // wgrad_dense_fold in runs instead of one output row segment at a time (a
  // 7-pixel row cost more to set up than its fmas): x packed by pack_x
  // (xpack), or for flat_pixels problems read in place (xpack == nullptr).
  // Measured (AVX2, one thread, batch 8): 1x1 7x7 2048->512 dw 21.3 -> 18.2
  // ms (runs) -> 12.4 ms (packed x); 1x1 56x56 64->256 18.3 -> 14.0 ms;
  // 3x3 14x14 256->256 29.3 -> 22.8 ms, 3x3 7x7 512->512 39.3 -> 30.2 ms.
  template <int NI, int NW>
  static inline __attribute__((always_inline)) void wgrad_run_fold(Vec (&acc)[NI][NW], const ConvProblem& p,
                                                                   const Chunks& ch, i64 k, const Rows<T>& x,
                                                                   i64 xoff, const T* xpack, const Rows<T>& dy,
                                                                   i64 dyoff) {
    Vec a[NI][NW];
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = V::zero();
    if (xpack)
      dy_runs(p, ch, k, dy, [&](i64 e0, const T* d, i64 n) {
        fold_run<NI, NW>(a, xpack + e0 * NI, NI, d + dyoff, p.Co, n);
      });
    else
      flat_runs(p, ch, k, x, dy, [&](i64, const T* xr, const T* d, i64 n) {
        fold_run<NI, NW, true>(a, xr + xoff, p.C, d + dyoff, p.Co, n);
      });
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) acc[t][j] = a[t][j];
  }

  // Dense tiles pack x (pack_x, pack_segment) where this many o-blocks share it.
  static constexpr i64 kPackBlocks = 8;

  // O-blocks per group in wgrad_dense: where one chunk's dy rows (L positions of all output channels)
  // outgrow what L2 keeps beside x, every i-tile streamed all of them from L3 again (Xception's 1x1
  // 728->728 at 19x19: 1 MB per chunk, 122 i-tiles). Grouped, the i-tiles sweep a group of o-blocks
  // whose dy rows stay in L2, x packed once per (i-tile, group). The groups are as even as they can
  // be: ceil(nb / groups) o-blocks each, the last group's missing ones units without work. One
  // group (nb) where the whole chunk's dy fits.
  static constexpr i64 kDyGroupBytes = i64(512) << 10;
  static i64 o_group(const Chunks& ch, i64 nb, i64 bw) {
    const i64 blk = ch.L * bw * i64(sizeof(T));
    if (nb * blk <= kDyGroupBytes) return nb;
    const i64 groups = ceil_div(nb * blk, kDyGroupBytes);
    return ceil_div(nb, groups);
  }

  // fn(std::integral_constant<int, NR>) with NR the rows a tile of NI folds
  // when only `live` of them are filter elements: a group's last tile of 2 or
  // 4 channels folds those alone instead of repeating its last row (64
  // channels in tiles of 6 were 66 folded rows). Each row's fold is its own,
  // so dropping the repeats moves no bit.
  template <int NI, class Fn>
  static inline __attribute__((always_inline)) void live_rows(i64 live, Fn&& fn) {
    if constexpr (NI > 4) {
      if (live <= 2) return fn(std::integral_constant<int, 2>());
      if (live <= 4) return fn(std::integral_constant<int, 4>());
    }
    fn(std::integral_constant<int, NI>());
  }

  // Chunk k of x and dy as a fold reads it: in place, or for float16 x and dy
  // (S = Half16; flat_pixels problems only, see flat_takes_half) its positions
  // widened once per chunk into this thread's buffers and read as chunk 0 of
  // a problem of their own: position r of the chunk is buffer position
  // r - begin, the same values in the same order. Widening the whole tensors
  // into float copies first made these layers' 16-bit filter gradients 0.65
  // of our float32 speed (the copies went to memory and came back).
  struct ChunkView {
    Chunks ch;
    i64 k;
    Rows<T> x, dy;
  };
  template <class S>
  class ChunkReader {
    static constexpr bool kWiden = !std::is_same<S, T>::value;

   public:
    // The buffers are not zero-filled (a fill per call cost more than the widening: running sums make one
    // call per chunk and share): every position's values are written before they are read, and the kPad
    // values after a chunk's last position are set to +0 (the folds' whole vectors read past it).
    ChunkReader(const ConvProblem& p, const Chunks& ch, const Rows<S>& x, const Rows<S>& dy)
        : p_(p), ch_(ch), x_(x), dy_(dy) {
      if constexpr (kWiden) {
        xw_.reset(new T[ch.L * p.C + kPad]);
        dw_.reset(new T[ch.L * p.Co + kPad]);
      }
    }
    ChunkView at(i64 k) {
      if constexpr (!kWiden) {
        return ChunkView{ch_, k, x_, dy_};
      } else {
        const i64 begin = ch_.begin(k), n = ch_.end(k) - begin, rows = ceil_div(n, p_.W);
        if (k != k_) {
          widen(x_, p_.W, p_.C, begin, n, xw_.get());
          widen(dy_, p_.OW, p_.Co, begin, n, dw_.get());
          k_ = k;
        }
        // Last row `rows`: past every position's row, so flat_runs reads the n positions as one run and no
        // row reaches the tail (none: it would lie past the buffer).
        const i64 xl = p_.W * p_.C, dl = p_.OW * p_.Co;
        return ChunkView{Chunks{n, n, 1}, 0, Rows<T>{xw_.get(), xl, rows, nullptr},
                         Rows<T>{dw_.get(), dl, rows, nullptr}};
      }
    }

   private:
    // Positions [begin, begin + n) of a flat tensor (pixel r = row r / W, column r % W), C values each,
    // then kPad zeros.
    static void widen(const Rows<S>& src, i64 W, i64 C, i64 begin, i64 n, T* dst) {
      for (i64 r = begin, end = begin + n; r < end;) {
        const i64 row = r / W, col = r % W, seg = std::min(end - r, W - col);
        // Stores past the run: the next run overwrites them, or the zeros below.
        widen_run(src.row(row) + col * C, dst + (r - begin) * C, seg * C);
        r += seg;
      }
      std::fill(dst + n * C, dst + n * C + kPad, T(0));
    }
    const ConvProblem& p_;
    const Chunks& ch_;
    const Rows<S>& x_;
    const Rows<S>& dy_;
    std::unique_ptr<T[]> xw_, dw_;
    i64 k_ = -1;
  };

  // Dense: lanes over BW = NW vectors of output channels of one group, NI
  // consecutive i of one (kh, kw) tap in registers; the fold runs over r
  // inside one chunk. S: x's and dy's element type (see ChunkReader).
  template <int NI, int NW, bool joint = false, class S = T>
  static void wgrad_dense(const ConvProblem& p, const Chunks& ch, const Rows<S>& x, const Rows<S>& dy,
                          const PartSink& parts, const CpuExecutor& ex) {
    constexpr int BW = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(cog, BW);
    const i64 kwn = joint ? 1 : p.KW, ib = ceil_div(joint ? p.KW * p.Cg : p.Cg, NI);  // tiles per filter row: kwn * ib
    const bool flat = Base::flat_pixels(p);
    // Packing x costs about one unit's fmas; it pays where many o-blocks share
    // it (and joint tiles need it), unless the o-blocks go outermost (x_in_l1).
    const bool o_outer = flat && !joint && x_in_l1(p, ch);
    const bool pack = !o_outer && (nb >= kPackBlocks || joint);
    const i64 og = pack ? o_group(ch, nb, BW) : nb, ng = ceil_div(nb, og);  // o-blocks per group, groups
    const i64 tiles = p.G * ng * og * p.KH * kwn * ib;
    // Joint tiles read x in place where their pairs are one run of it (wgrad_joint_fold; one process,
    // batch 8, two threads, stem 7x7/2 224 3->64: AVX-512 14.1 -> 9.9 ms, AVX2 28.3 -> 25.4).
    auto in_place = [](const TileRows<NI, joint>& r) { return joint && std::is_same<S, T>::value && r.contiguous; };
    for_chunk_tiles(ch, tiles, ch.L * NI * BW, parts, ex, [&](i64 u0, i64 u1) {
      FpEnv guard;
      alignas(64) T tmp[kLanes];
      std::vector<T> xpack(pack ? ch.L * NI : 0);  // this tile's x (bl == 0 fills it)
      TileRows<NI, joint> rows;
      ChunkReader<S> reader(p, ch, x, dy);
      // Unit u = (((((k*G + g)*KH + kh)*kwn + kw)*ng + bg)*ib + bi)*og + bl, o-block b = bg*og + bl,
      // decoded once and then counted up. Output-channel blocks innermost: one i-block's x values
      // stay in L1 while the chunk's dy rows of the group's channels (o_group) stay in L2. With
      // o_outer, bi and bl trade places (... *og + bl)*ib + bi. Either way each unit folds its own
      // outputs of chunk k, so the order moves no bit.
      i64 bl = 0, bi = 0;
      i64 &inner = o_outer ? bi : bl, &outer = o_outer ? bl : bi;  // counted as the unit order has them
      const i64 ninner = o_outer ? ib : og, nouter = o_outer ? og : ib;
      i64 rem = u0;
      inner = rem % ninner; rem /= ninner;
      outer = rem % nouter; rem /= nouter;
      i64 bg = rem % ng; rem /= ng;
      i64 kw = rem % kwn; rem /= kwn;
      i64 kh = rem % p.KH; rem /= p.KH;
      i64 g = rem % p.G, k = rem / p.G;
      for (i64 u = u0; u < u1; ++u) {
        if (u > u0 && ++inner == ninner) {
          inner = 0;
          if (++outer == nouter) {
            outer = 0;
            if (++bg == ng) {
              bg = 0;
              if (++kw == kwn) {
                kw = 0;
                if (++kh == p.KH) {
                  kh = 0;
                  if (++g == p.G) { g = 0; ++k; }
                }
              }
            }
          }
        }
        const i64 b = bg * og + bl, i0 = bi * NI, o0 = g * cog + b * BW;
        if (b >= nb) continue;  // past the last group's o-blocks (bl > 0: no tile starts here)
        const ChunkView c = reader.at(k);
        if (pack && (u == u0 || bl == 0)) {  // a new tile: the o-blocks after it share its x
          rows = TileRows<NI, joint>(p, kw, bi);
          if (!in_place(rows)) pack_x<NI, joint>(p, c.ch, c.k, kh, rows, c.x, g * p.Cg, xpack.data());
        }
        Vec acc[NI][NW];
        if constexpr (joint && std::is_same<S, T>::value) {
          if (in_place(rows)) wgrad_joint_fold<NI, NW>(acc, p, c.ch, c.k, kh, rows, c.x, c.dy, o0, xpack.data());
          else wgrad_run_fold<NI, NW>(acc, p, c.ch, c.k, c.x, g * p.Cg + i0, xpack.data(), c.dy, o0);
        } else if (pack) {
          wgrad_run_fold<NI, NW>(acc, p, c.ch, c.k, c.x, g * p.Cg + i0, xpack.data(), c.dy, o0);
        } else {
          live_rows<NI>(p.Cg - i0, [&](auto nr) {
            constexpr int NR = decltype(nr)::value;
            Vec a[NR][NW];
            if (flat) wgrad_run_fold<NR, NW>(a, p, c.ch, c.k, c.x, g * p.Cg + i0, nullptr, c.dy, o0);
            else wgrad_dense_fold<NR, NW>(a, p, c.ch, c.k, kh, kw, c.x, g * p.Cg + i0, c.dy, o0);
            for (int t = 0; t < NR; ++t)
              for (int j = 0; j < NW; ++j) acc[t][j] = a[t][j];
          });
        }
        if constexpr (joint) {  // rows of (kw, i) pairs: not one stride apart
          for (int t = 0; t < NI; ++t)
            for (int j = 0; j < NW; ++j) {
              if (t >= rows.n) continue;
              const i64 ol0 = b * BW + j * kLanes;
              const i64 e = (kh * p.KW + rows.kw[t]) * p.Cg + rows.i[t];
              parts.put(k, e * p.Co + g * cog + ol0, acc[t][j], cog - ol0, tmp);
            }
        } else {
          parts.put_tile(k, ((kh * p.KW + kw) * p.Cg + i0) * p.Co + g * cog + b * BW, p.Co, acc, p.Cg - i0,
                         cog - b * BW, tmp);
        }
      }
    });
  }

  // Sub-runs: where a chunk's x and dy rows (L positions of C + Co values)
  // outgrow what L2 keeps next to the rest, every tile streamed them from
  // memory again. Instead the tiles of one (g, kh) go through the chunk
  // together, a sub-run of whole output row segments (>= kSubRun positions)
  // at a time, keeping their accumulators in memory between sub-runs (an
  // exact round trip: each fold is still r ascending), x packed per sub-run
  // where wgrad_dense packs it. Batch 8 (3-D: 2 x 16 deep), two threads, in
  // one process, ms (Intel Xeon):
  //   AVX-512: 3x3 56x56 256->256 374 -> 93; 3x3x3 14x14 256->256 160 -> 75,
  //   28x28 128->128 114 -> 72, 56x56 64->64 (C3D) 76.6 -> 73.7, 75.2 ->
  //   72.5; 3x3 28x28 256->256 25.3 -> 24.4; (below kSubRunBytes: 3x3 56x56
  //   128->128, 0.9 MB, 23.4 -> 24.0; 112x112 64->64 24.4 -> 25.0);
  //   AVX2: 3x3 56x56 256->256 457 -> 159; 3x3x3 14x14 256->256 195 -> 129,
  //   28x28 128->128 161 -> 123, C3D 128 -> 126; 3x3 28x28 256->256 42.0 ->
  //   41.3, 43.2 -> 41.8 (x packed per sub-run: unpacked, 48 ms; packing
  //   where 2 or 4 o-blocks share x instead, AVX-512: even or slower).
  // 1x1 layers too (flat_pixels; their chunks grow with the batch), AVX-512,
  // batch 32, alternating processes, first quartiles, measured with sub-runs
  // of 224 positions (kFlatSubRun below took over since, even on these):
  // 14x14 1024->256 36.4, 38.2 -> 30.1, 29.8; 7x7 2048->512 30.1, 41.3 ->
  // 26.2, 26.1; 19x19 728->728 112, 106 -> 92, 99; batch 8, 19x19 728->728
  // (grouped o-blocks before, wgrad_dense): 28.7, 29.0, 26.5 -> 26.5, 25.9,
  // 27.6.
  // The portable path keeps whole-chunk tiles (V::kSubRuns): the tests'
  // oracle where the reference would take minutes.
  static constexpr i64 kSubRunBytes = i64(1) << 20;
  // 1x1 layers (flat_pixels) also where one output-channel block's dy rows in a chunk pass kDyBlockL1,
  // in sub-runs of kFlatSubRun positions, whose 64-channel dy block (24 KiB) stays in L1 while the
  // input-channel tiles sweep it. Batch 32, alternating, first quartiles, ms: 1x1 56x56 256->64 (392
  // positions of 1.25 KB a chunk) 29.7 -> 22.9, 14x14 1024->256 28.8 -> 24.3; 224-position sub-runs
  // 1024->256 30.0. Not a threshold on the chunk: batch 8's 14x14 1024->256 and 7x7 2048->512 (98
  // positions, 25 KB blocks already in L1) slowed 6.3 -> 7.6 and 6.9 -> 8.6 with sub-runs.
  static constexpr i64 kDyBlockL1 = i64(48) << 10, kFlatSubRun = 96;
  static i64 dy_block_bytes(const ConvProblem& p, const Chunks& ch) {
    const i64 bw = i64(kLanes) * (wide_dw(p) ? WW : NV);
    return ch.L * std::min(p.Cog(), bw) * i64(sizeof(T));
  }
  // Whether a chunk's x rows and one o-block's dy rows fit in L1 together (32 KiB, AMD's; Intel's 48):
  // wgrad_dense then takes the o-blocks outermost and reads x in place, so every i-tile finds both
  // there; with i-tiles outermost each streamed the chunk's whole dy from L2. AVX2, batch 8, two
  // threads, in one process, ms: 1x1 56x56 64->256 (98 positions: 25 + 6 KB) 7.85 -> 7.08 and
  // 7.72 -> 6.97 (AMD Zen 4); AVX-512's 64-channel blocks (25 + 25 KB) measured 5% slower that way.
  static constexpr i64 kXDyL1 = i64(32) << 10;
  static bool x_in_l1(const ConvProblem& p, const Chunks& ch) {
    return ch.L * p.C * i64(sizeof(T)) + dy_block_bytes(p, ch) <= kXDyL1;
  }
  static bool sub_runs(const ConvProblem& p, const Chunks& ch) {
    return V::kSubRuns && (ch.L * position_bytes(p) > kSubRunBytes ||
                           (Base::flat_pixels(p) && dy_block_bytes(p, ch) > kDyBlockL1));
  }

  // A sub-run's positions: at least kSubRun, and at least those whose x and
  // dy values fill kSubRunFill, so that its per-tile costs (accumulators
  // loaded and stored, segments set up) are paid less often where pixels are
  // narrow and the rows still fit L2: C3D's 64 + 64 channels filled 115 KB in
  // 224 positions, now 560 (10 rows). Alternating in one process, AVX-512,
  // ms: two threads 117.4 -> 109.1 (first quartiles), one 225.4 -> 206.0
  // (medians); 672-1120 positions even, 1344 slower; 3x3x3 28x28 128->128:
  // 224 and 448 even, 896 slower. Pixels of 256+ channels keep 224.
  static constexpr i64 kSubRun = 224, kSubRunFill = i64(256) << 10;
  static i64 sub_run_len(const ConvProblem& p) {
    if (Base::flat_pixels(p)) return kFlatSubRun;
    return std::max(kSubRun, kSubRunFill / position_bytes(p));
  }

  struct Seg { i64 n, oh, ow, len; };  // an output row segment: len positions from (n, oh, ow)
  struct TileAt { i64 kw, bi, b, i0, o0, first_out, end_out; };  // a sub-run tile: its tap, blocks, first channels

  // The sub-run folds below take a tile's accumulators from st (+0 where
  // `first`) and leave them there. Not inlined: one call per tile and
  // sub-run (224+ positions) costs little, and the fold's loops get the
  // registers to themselves instead of sharing them with the tile loop's.

  // fold_segment over segments [s0, s1).
  template <int NI, int NW>
  static __attribute__((noinline)) void fold_segments(T* st, bool first, const ConvProblem& p, const Seg* s0,
                                                      const Seg* s1, i64 kh, i64 kw, i64 first_out, i64 end_out,
                                                      const Rows<T>& x, i64 xoff, const Rows<T>& dy, i64 dyoff) {
    Vec a[NI][NW];
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = first ? V::zero() : V::load(st + (t * NW + j) * kLanes);
    for (const Seg* s = s0; s < s1; ++s)
      fold_segment<NI, NW>(a, p, s->n, s->oh, s->ow, s->len, kh, kw, first_out, end_out, x, xoff, dy, dyoff);
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) V::store(st + (t * NW + j) * kLanes, a[t][j]);
  }

  // fold_run over segments [s0, s1) of packed x (pack_segment).
  template <int NI, int NW>
  static __attribute__((noinline)) void fold_packed_segments(T* st, bool first, const ConvProblem& p, const Seg* s0,
                                                             const Seg* s1, const T* xq, const Rows<T>& dy, i64 dyoff) {
    Vec a[NI][NW];
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) a[t][j] = first ? V::zero() : V::load(st + (t * NW + j) * kLanes);
    for (const Seg* s = s0; s < s1; xq += s->len * NI, ++s)
      fold_run<NI, NW>(a, xq, NI, dy.row(s->n * p.OH + s->oh) + s->ow * p.Co + dyoff, p.Co, s->len);
    for (int t = 0; t < NI; ++t)
      for (int j = 0; j < NW; ++j) V::store(st + (t * NW + j) * kLanes, a[t][j]);
  }

  // Dense tiles in sub-runs (sub_runs above): the same tiles, units and
  // sinks as wgrad_dense, its unit order ((k*G + g)*KH + kh, then kw, bi, b).
  template <int NI, int NW>
  static void wgrad_dense_subruns(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy,
                                  const PartSink& parts, const CpuExecutor& ex) {
    constexpr int BW = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(cog, BW), ib = ceil_div(p.Cg, NI);
    const i64 row_tiles = p.KW * ib * nb;  // the tiles of one (g, kh)
    const i64 tiles = p.G * p.KH * row_tiles;
    const i64 run_len = sub_run_len(p);
    for_chunk_tiles(ch, tiles, ch.L * NI * BW, parts, ex, [&](i64 u0, i64 u1) {
      FpEnv guard;
      alignas(64) T tmp[kLanes];
      std::vector<Seg> segs;
      std::vector<TileAt> at;
      std::vector<T> state;  // the accumulators of tiles [t0, t1) between sub-runs
      const bool pack = nb >= kPackBlocks;
      std::vector<T> xpack(pack ? (run_len + p.OW) * NI : 0);  // one sub-run's x for one (kw, bi)
      TileRows<NI, false> rows;
      i64 seg_chunk = -1;
      for (i64 u = u0; u < u1;) {
        // Tiles [t0, t1) of chunk k: one (g, kh) and this range's share of it.
        const i64 k = u / tiles, t0 = u % tiles, grp = t0 / row_tiles;
        const i64 t1 = std::min(u1 - k * tiles, (grp + 1) * row_tiles);
        if (seg_chunk != k) {  // chunk k's row segments, r ascending
          segs.clear();
          row_segments(p, ch, k, [&](i64 n, i64 oh, i64 ow, i64 seg) { segs.push_back(Seg{n, oh, ow, seg}); });
          seg_chunk = k;
        }
        const i64 g = grp / p.KH, kh = grp % p.KH;
        // Tiles [t0, t1) decoded once: t0's (kw, bi, b) divided, the others counted up from it (four 64-bit
        // divisions per tile and sub-run, 40-90 cycles each, were 6-13% of its ~2,700 cycles of fmas: C3D, AVX-512).
        at.clear();
        {
          const i64 rem0 = t0 % row_tiles;
          i64 b = rem0 % nb, bi = rem0 / nb % ib, kw = rem0 / nb / ib;
          for (i64 t = t0; t < t1; ++t) {
            if (t > t0 && ++b == nb) {
              b = 0;
              if (++bi == ib) { bi = 0; ++kw; }
            }
            at.push_back(TileAt{kw, bi, b, bi * NI, g * cog + b * BW, fprop_first_out(p, kw), fprop_end_out(p, kw)});
          }
        }
        const i64 nt = t1 - t0;
        state.resize(size_t(nt * NI * NW * kLanes));
        auto st_of = [&](i64 q) { return state.data() + q * NI * NW * kLanes; };
        for (size_t s0 = 0; s0 < segs.size();) {
          size_t s1 = s0;
          for (i64 len = 0; s1 < segs.size() && len < run_len;) len += segs[s1++].len;
          if (pack) {
            for (i64 q = 0; q < nt; ++q) {
              const TileAt& a = at[q];
              if (q == 0 || a.b == 0) {  // a new (kw, bi): the o-blocks after it share its x
                rows = TileRows<NI, false>(p, a.kw, a.bi);
                T* xp = xpack.data();
                for (size_t sg = s0; sg < s1; ++sg)
                  xp = pack_segment<NI, false>(p, segs[sg].n, segs[sg].oh, segs[sg].ow, segs[sg].len, kh, rows, x, g * p.Cg, xp);
              }
              fold_packed_segments<NI, NW>(st_of(q), s0 == 0, p, segs.data() + s0, segs.data() + s1, xpack.data(), dy, a.o0);
            }
          } else {
            for (i64 q = 0; q < nt; ++q) {
              const TileAt& a = at[q];
              live_rows<NI>(p.Cg - a.i0, [&](auto nr) {
                fold_segments<decltype(nr)::value, NW>(st_of(q), s0 == 0, p, segs.data() + s0, segs.data() + s1, kh, a.kw,
                                                       a.first_out, a.end_out, x, g * p.Cg + a.i0, dy, a.o0);
              });
            }
          }
          if (s1 == segs.size())
            for (i64 q = 0; q < nt; ++q) {
              const TileAt& a = at[q];
              Vec v[NI][NW];
              for (int r = 0; r < NI; ++r)
                for (int j = 0; j < NW; ++j) v[r][j] = V::load(st_of(q) + (r * NW + j) * kLanes);
              parts.put_tile(k, ((kh * p.KW + a.kw) * p.Cg + a.i0) * p.Co + g * cog + a.b * BW, p.Co, v,
                             p.Cg - a.i0, cog - a.b * BW, tmp);
            }
          s0 = s1;
        }
        u = k * tiles + t1;
      }
    });
  }

  // The r loop of one depthwise dw tile (PW taps kw0.. of row kh x BW
  // channels), on private accumulators, one output row segment at a time.
  // x holds one input channel per output channel (see repeat_channels).
  static inline __attribute__((always_inline)) void wgrad_dw_fold(Vec (&acc)[PW][NV], const ConvProblem& p,
                                                                  const Chunks& ch, i64 k, i64 kh, i64 kw0, i64 o0,
                                                                  const Rows<T>& x, const Rows<T>& dy,
                                                                  const T* zeros) {
    Vec a[PW][NV];
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
        Vec dv[NV];
        for (int j = 0; j < NV; ++j) dv[j] = V::load(dyr + j * kLanes);
        for (int t = 0; t < PW; ++t) {
          const i64 iw = fprop_in_col(p, ow, kw0 + t);
          // +0 in padding (and for taps past KW, whose results are dropped).
          const T* px = (row_in && iw >= 0 && iw < p.W && kw0 + t < p.KW) ? xrow + iw * p.Co : zeros;
          for (int j = 0; j < NV; ++j) a[t][j] = V::fma(V::load(px + j * kLanes), dv[j], a[t][j]);
        }
      }
      r += seg;
    }
    for (int t = 0; t < PW; ++t)
      for (int j = 0; j < NV; ++j) acc[t][j] = a[t][j];
  }

  // Depthwise-like (Cg == 1): lanes over all output channels, NK taps (kw) of one row.
  static void wgrad_dw(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy,
                       const PartSink& parts, const CpuExecutor& ex) {
    constexpr int NK = PW;  // taps per register tile
    const i64 cog = p.Cog(), nb = ceil_div(p.Co, BW), kb = ceil_div(p.KW, NK);
    std::vector<T> xr;
    if (cog > 1) xr = repeat_channels(p, x, cog);
    const Rows<T> xin = cog > 1 ? rows_of(xr, p.N * p.H, p.W * p.Co) : x;
    const std::vector<T> zeros(nb * BW + kPad, T(0));
    for_chunk_tiles(ch, nb * p.KH * kb, ch.L * NK * BW, parts, ex, [&](i64 u0, i64 u1) {
      FpEnv guard;
      alignas(64) T tmp[kLanes];
      for (i64 u = u0; u < u1; ++u) {
        i64 rem = u;
        const i64 bk = rem % kb; rem /= kb;
        const i64 kh = rem % p.KH; rem /= p.KH;
        const i64 b = rem % nb, k = rem / nb;
        const i64 kw0 = bk * NK, o0 = b * BW;
        Vec acc[NK][NV];
        wgrad_dw_fold(acc, p, ch, k, kh, kw0, o0, xin, dy, zeros.data());
        parts.put_tile(k, (kh * p.KW + kw0) * p.Co + o0, p.Co, acc, p.KW - kw0, p.Co - o0, tmp);
      }
    });
  }

  // One output row segment of wgrad_dw33: positions e = 0..seg-1, tap 0 of
  // position e at column c0 + e*SW, NB vectors of channels, on private
  // accumulators (see micro()). xr[kh]: filter row kh's input row at this
  // unit's channels (a row of +0 for a padded row). Columns outside [0, W)
  // read +0: the few positions whose taps reach them take checked loads;
  // between them every column is inside, and the columns each filter row
  // meets slide by SW per position (one vector on AVX-512 keeps them in
  // registers and loads only the new ones).
  template <int SW, int NB, class S>
  static inline __attribute__((always_inline)) void dw33_segment(Vec (&acc)[NB][3][3], const S* const (&xr)[3], i64 C,
                                                                 i64 W, const S* dyr, i64 Co, i64 seg, i64 c0) {
    constexpr bool kSlide = NB == 1 && sizeof(Vec) >= 64;  // 9 + 9 + 1 vectors fit 32 registers
    Vec a[NB][3][3], w[3][3];
    for (int b = 0; b < NB; ++b)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) a[b][kh][kw] = acc[b][kh][kw];
    // Positions [lo, hi) meet columns inside the row only.
    const i64 lo = std::min(seg, c0 >= 0 ? 0 : ceil_div(-c0, SW));
    const i64 hi = std::max(lo, std::min(seg, W - 3 - c0 < 0 ? 0 : (W - 3 - c0) / SW + 1));
    auto checked = [&](i64 e) {
      for (int b = 0; b < NB; ++b) {
        const Vec dv = V::load(dyr + e * Co + b * kLanes);
        for (int kh = 0; kh < 3; ++kh)
          for (int kw = 0; kw < 3; ++kw) {
            const i64 c = c0 + e * SW + kw;
            a[b][kh][kw] = V::fma(c >= 0 && c < W ? V::load(xr[kh] + c * C + b * kLanes) : V::zero(), dv, a[b][kh][kw]);
          }
      }
    };
    for (i64 e = 0; e < lo; ++e) checked(e);
    if (kSlide && lo < hi)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) w[kh][kw] = V::load(xr[kh] + (c0 + lo * SW + kw) * C);
    for (i64 e = lo; e < hi; ++e) {
      const i64 c = c0 + e * SW;
      for (int b = 0; b < NB; ++b) {
        const Vec dv = V::load(dyr + e * Co + b * kLanes);
        for (int kh = 0; kh < 3; ++kh)
          for (int kw = 0; kw < 3; ++kw) {
            if (!kSlide) w[kh][kw] = V::load(xr[kh] + (c + kw) * C + b * kLanes);
            a[b][kh][kw] = V::fma(w[kh][kw], dv, a[b][kh][kw]);
          }
      }
      if (kSlide && e + 1 < hi)
        for (int kh = 0; kh < 3; ++kh) {  // the next position's columns
          if (SW == 1) {
            w[kh][0] = w[kh][1];
            w[kh][1] = w[kh][2];
          } else {
            w[kh][0] = w[kh][2];
            w[kh][1] = V::load(xr[kh] + (c + SW + 1) * C);
          }
          w[kh][2] = V::load(xr[kh] + (c + SW + 2) * C);
        }
    }
    for (i64 e = hi; e < seg; ++e) checked(e);
    for (int b = 0; b < NB; ++b)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) acc[b][kh][kw] = a[b][kh][kw];
  }

  // Depthwise 3x3 (one output channel per group, width dilation 1, width
  // stride SW): one unit is one chunk of NB vectors of channels with all 9
  // taps of each in registers, so x and dy stream once per chunk. With one
  // vector, along a row the columns each filter row meets slide by SW per
  // position (AVX-512 keeps them loaded and reads only the new ones); two
  // vectors' 18 accumulators leave no room for that, and each position's
  // columns are read from L1 instead. Every tap's fold is r ascending,
  // padded columns and rows as +0. S: x's and dy's element type (T, or
  // Half16 widened as loaded).
  template <int SW, class S>
  static void wgrad_dw33(const ConvProblem& p, const Chunks& ch, const Rows<S>& x, const Rows<S>& dy,
                         const PartSink& parts, const CpuExecutor& ex) {
    if constexpr (std::is_same<S, T>::value)
      if (dw33_pairs(p)) return wgrad_dw33_units<SW, 2, S>(p, ch, x, dy, parts, ex);
    wgrad_dw33_units<SW, 1, S>(p, ch, x, dy, parts, ex);
  }

  // Two vectors per wgrad_dw33 unit (32 registers, x and dy in the accumulator type) where that measured
  // faster: stride 2, or pixels of at most 4 vectors. These layers stream x and dy from memory, and a unit
  // reading two of a pixel's lines in one pass got more from it than one line in each of two passes, though
  // it issues 20 loads per position instead of 4 (AVX-512, batch 8, two threads, one process alternating,
  // two runs each, ms: 3x3 112x112x32 3.16 -> 2.78, 3.36 -> 2.97; 112x112x64 7.43 -> 6.53, 7.35 -> 6.59;
  // 3x3/2 112x112x96 6.87 -> 5.91, 6.02 -> 5.28; 56x56x96/2 3.15 -> 2.63, 2.15 -> 2.01; float64 112x112x32
  // 7.04 -> 6.24. Not taken: 56x56x144 3.46 -> 3.52, 4.11 -> 4.32; 28x28x144 1.44 -> 1.51; 56x56x128 and
  // 14x14x512 even to 8% slower; float16 x and dy even).
  static bool dw33_pairs(const ConvProblem& p) {
    return sizeof(Vec) >= 64 && (p.sw == 2 || ceil_div(p.Co, kLanes) <= 4);
  }

  // wgrad_dw33 in units of chunk k x NB vectors of channels (fewer in a last unit).
  template <int SW, int NB, class S>
  static void wgrad_dw33_units(const ConvProblem& p, const Chunks& ch, const Rows<S>& x, const Rows<S>& dy,
                               const PartSink& parts, const CpuExecutor& ex) {
    const i64 nv = ceil_div(p.Co, kLanes), nb = ceil_div(nv, NB);
    const std::vector<S> zero_row(p.W * p.C + kPad, S{});  // what a padded filter row reads
    for_chunk_tiles(ch, nb, ch.L * 9 * NB * kLanes, parts, ex, [&](i64 u0, i64 u1) {
      FpEnv guard;
      alignas(64) T tmp[kLanes];
      for (i64 u = u0; u < u1; ++u) {
        const i64 k = u / nb, v0 = u % nb * NB;  // channel blocks innermost: they share the chunk's rows
        Base::template with_width<NB, 1>(int(std::min<i64>(NB, nv - v0)), [&](auto w) {
          dw33_unit<SW, decltype(w)::value, S>(p, ch, k, v0 * kLanes, x, dy, zero_row.data(), parts, tmp);
        });
      }
    });
  }

  // One wgrad_dw33 unit: chunk k of the NB vectors of channels from o0.
  template <int SW, int NB, class S>
  static void dw33_unit(const ConvProblem& p, const Chunks& ch, i64 k, i64 o0, const Rows<S>& x, const Rows<S>& dy,
                        const S* zero_row, const PartSink& parts, T* tmp) {
    Vec acc[NB][3][3];
    for (int b = 0; b < NB; ++b)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) acc[b][kh][kw] = V::zero();
    for (i64 r = ch.begin(k), end = ch.end(k); r < end;) {
      i64 n, oh, ow;
      split_r(p, r, n, oh, ow);
      const i64 seg = std::min(end - r, p.OW - ow);
      const S* xr[3];
      for (int kh = 0; kh < 3; ++kh) {
        const i64 ih = fprop_in_row(p, oh, kh);
        xr[kh] = (ih >= 0 && ih < p.H ? x.row(n * p.H + ih) : zero_row) + o0;
      }
      dw33_segment<SW, NB, S>(acc, xr, p.C, p.W, dy.row(n * p.OH + oh) + ow * p.Co + o0, p.Co, seg, ow * SW - p.pl);
      r += seg;
    }
    Vec taps[9][NB];  // tap-major, as dw lies: tap t's NB vectors at t*Co + o0
    for (int b = 0; b < NB; ++b)
      for (int t = 0; t < 9; ++t) taps[t][b] = acc[b][t / 3][t % 3];
    parts.put_tile(k, o0, p.Co, taps, 9, p.Co - o0, tmp);
  }

  // Grouped layers with lanes across groups (Base::grouped_lanes; ResNeXt's 4 + 4 per group): one unit is
  // one chunk of one tap (kh, kw) x NW vectors of output channels (kLanes / Cog groups each) x NR >= Cg
  // input channels; lane o's row i folds x[r, g*Cg + i] * dy[r, o] over the chunk, r ascending, its x
  // value moved into place by a lane permute of the vector's groups' input channels (as
  // FpropKernels::fprop_grouped). Padded positions fold +0 x dy, as the contract says. Taps innermost:
  // the chunk's dy and x values of the unit's channels stay in L1 while its KH*KW taps read them.
  // Against the dense tiles of one group (batch 8, two threads, in one process, medians, ms): 3x3 56x56
  // 128->128 in 32 groups (4 + 4) AVX-512 19.1 -> 6.8 (through TensorFlow's op; TensorFlow 10.0-13.7),
  // AVX2 11.2 -> 6.5; 28x28 256->256 (8 + 8) AVX-512 10.3 -> 4.8; 14x14 512->512 (16 + 16) 4.63 -> 3.92;
  // 56x56 64->64 (2 + 2) AVX2 8.37 -> 2.25.
  template <int NR, int NW>
  static void wgrad_grouped(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy,
                            const PartSink& parts, const CpuExecutor& ex) {
    constexpr int BD = kLanes * NW;
    const i64 cog = p.Cog(), nb = ceil_div(p.Co, BD), khw = p.KH * p.KW, tiles = nb * khw;
    // idx[i][l]: where lane l's x value for input channel i lies (rows past Cg repeat the last: dropped).
    const std::vector<std::int32_t> idx = Base::group_lane_table(cog, p.Cg, NR, p.Cg);
    const std::vector<T> zeros(p.C + BD + kPad, T(0));  // a padded position's (or a vector's past Co) x values
    for_chunk_tiles(ch, tiles, ch.L * NR * BD, parts, ex, [&](i64 u0, i64 u1) {
      FpEnv guard;
      alignas(64) T tmp[kLanes];
      for (i64 u = u0; u < u1; ++u) {
        const i64 k = u / tiles, t = u % tiles, b = t / khw, tap = t % khw, kh = tap / p.KW, kw = tap % p.KW;
        const i64 o0 = b * BD;
        i64 xoff[NW];  // vector j's first input channel, its groups' first
        bool real[NW];
        for (int j = 0; j < NW; ++j) {
          real[j] = o0 + j * kLanes < p.Co;
          xoff[j] = real[j] ? (o0 + j * kLanes) / cog * p.Cg : 0;
        }
        Vec a[NR][NW];
        for (int i = 0; i < NR; ++i)
          for (int j = 0; j < NW; ++j) a[i][j] = V::zero();
        // n positions from dy row d, x from xq (+0: zeros, step 0) stepping xstep values.
        auto fold = [&](const T* xq, i64 xstep, const T* d, i64 n) __attribute__((always_inline)) {
          for (i64 e = 0; e < n; ++e, xq += xstep, d += p.Co) {
            Vec dv[NW], xv[NW];
            for (int j = 0; j < NW; ++j) {
              dv[j] = V::load(d + j * kLanes);
              xv[j] = V::load((real[j] ? xq : zeros.data()) + xoff[j]);
            }
            for (int i = 0; i < NR; ++i) {
              const typename V::P pi = V::perm_index(idx.data() + i * kLanes);
              for (int j = 0; j < NW; ++j) a[i][j] = V::fma(V::permute(xv[j], pi), dv[j], a[i][j]);
            }
          }
        };
        const i64 first = fprop_first_out(p, kw), end = fprop_end_out(p, kw);
        row_segments(p, ch, k, [&](i64 n, i64 oh, i64 ow, i64 seg) __attribute__((always_inline)) {
          const i64 ih = fprop_in_row(p, oh, kh);
          const T* dyr = dy.row(n * p.OH + oh) + ow * p.Co + o0;
          i64 lo, hi;
          segment_span(p, ih, ow, seg, first, end, lo, hi);
          fold(zeros.data(), 0, dyr, lo);
          if (hi > lo)
            fold(x.row(n * p.H + ih) + fprop_in_col(p, ow + lo, kw) * p.C, p.sw * p.C, dyr + lo * p.Co, hi - lo);
          fold(zeros.data(), 0, dyr + hi * p.Co, seg - hi);
        });
        for (int i = 0; i < NR; ++i)
          for (int j = 0; j < NW; ++j) {
            if (i >= p.Cg || !real[j]) continue;
            const i64 ol0 = o0 + j * kLanes;
            parts.put(k, (tap * p.Cg + i) * p.Co + ol0, a[i][j], p.Co - ol0, tmp);
          }
      }
    });
  }
  // wgrad_grouped with NR the least of 2, 4, 8, 16 rows that holds Cg (<= Cog <= kLanes).
  static void wgrad_grouped_rows(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy,
                                 const PartSink& parts, const CpuExecutor& ex) {
    if (p.Cg <= 2) wgrad_grouped<2, 1>(p, ch, x, dy, parts, ex);
    else if (p.Cg <= 4) wgrad_grouped<4, 1>(p, ch, x, dy, parts, ex);
    else if (p.Cg <= 8 || kLanes <= 8) wgrad_grouped<8, 1>(p, ch, x, dy, parts, ex);
    else wgrad_grouped<16, 1>(p, ch, x, dy, parts, ex);
  }

  // Joint tiles (stems: few channels, several kw): NI consecutive (kw, i)
  // pairs of a filter row. With 32 registers (AVX-512's float32 path) the
  // tile takes TI - 1 or TI + 1 rows where fewer of them run past the row's
  // KW*Cg pairs: a 7x7x3 stem's 21 pairs are 3 tiles of 7, not 3 of 8 with
  // 3 rows computed and dropped. For 64+ output channels, where at most 1/8
  // of its rows run past the pairs, 7 pairs x 4 vectors (28 accumulators, one
  // of which GCC keeps on the stack, as in the 7x4 forward tiles): half the
  // broadcasts and x reads per fma of 7 x 2 (batch 8, two threads, one
  // process alternating, stem 7x7/2 224 3->64: 31.5 -> 28.8, 32.4 -> 27.9,
  // 30.7 -> 28.4 ms; 6 x 4, its 21 pairs in 4 tiles of 6: 33.0).
  static constexpr int kJointWide = 7;
  static void wgrad_joint(const ConvProblem& p, const Chunks& ch, const Rows<T>& x, const Rows<T>& dy,
                          const PartSink& parts, const CpuExecutor& ex) {
    if constexpr (Base::kWideDw) {
      const i64 pairs = p.KW * p.Cg;
      auto rows = [&](i64 ni) { return ceil_div(pairs, ni) * ni; };
      if (p.Cog() >= WW * kLanes && 8 * (rows(kJointWide) - pairs) <= rows(kJointWide))
        return wgrad_dense<kJointWide, WW, true>(p, ch, x, dy, parts, ex);
      if (rows(TI - 1) < rows(TI) && rows(TI - 1) <= rows(TI + 1)) return wgrad_dense<TI - 1, NV, true>(p, ch, x, dy, parts, ex);
      if (rows(TI + 1) < rows(TI)) return wgrad_dense<TI + 1, NV, true>(p, ch, x, dy, parts, ex);
    }
    wgrad_dense<TI, NV, true>(p, ch, x, dy, parts, ex);
  }

  // Depthwise 3x3 with width stride 1 or 2 and no width dilation: wgrad_dw33.
  static bool dw33(const ConvProblem& p) {
    return p.Cg == 1 && p.Cog() == 1 && p.KH == 3 && p.KW == 3 && p.dw == 1 && (p.sw == 1 || p.sw == 2);
  }

  // Folds the chunks with fold(ch, sink): into P parts that combine() then adds in chunk order, or
  // into running sums (running_sums) whose last chunk writes dw itself; no outputs: dw = +0.
  template <class Fold>
  static void wgrad_parts(const ConvProblem& p, const OutSpec& dw, const CpuExecutor& ex, Fold&& fold) {
    const i64 F = p.filter_elems();
    const Chunks ch = reduction_chunks(p.R(), F);
    if (ch.P == 0) {
      ex.parallel_for(F, 1, [&](i64 e0, i64 e1) { for (i64 e = e0; e < e1; ++e) dw.put(e, T(0)); });
      return;
    }
    const bool running = running_sums(p, ch, F, ex.threads());
    Workspace<T> parts(ex, (running ? 1 : ch.P) * F);  // every part (sum) written before it is read
    fold(ch, PartSink{parts.data(), F, running, running_shares(p, ex.threads()), ch.P - 1, &dw});
    if (!running) combine(ch, F, parts.data(), dw, ex);
  }

  // The 1x1, stride-1, unpadded, one-group problems that take wgrad_dense (not sub-runs) whose float16
  // x and dy are widened per chunk (ChunkReader): where float copies of them would not stay in the
  // shared cache (widened per chunk, they never reach memory), with chunks of at most 4 MiB of values
  // (the buffers, per thread). Where the copies stay in the cache, each share of the running sums would
  // widen every chunk again, and that cost more (AVX-512, batch 8, two threads: 1x1 14x14 1024->256,
  // 7x7 2048->512 0.92-0.95 -> 0.77-0.84 of our float32 speed; 1x1 56x56 0.64-0.79 -> 0.86-0.95).
  static bool flat_takes_half(const ConvProblem& p) {
    return Base::flat_pixels(p) && p.G == 1 && !Base::depthwise(p) && !in_shared_cache(p) &&
           reduction_chunks(p.R(), p.filter_elems()).L * position_bytes(p) <= (i64(4) << 20);
  }

  // Dense tiles of 64+ output channels per group take the ISA's wide tile.
  static bool wide_dw(const ConvProblem& p) { return Base::kWideDw && p.Cog() >= WW * kLanes; }

  // float16 x and dy read in place: wgrad_takes_half (kernels_impl.h) chose this problem, dw33 or flat_takes_half.
  static void wgrad_half(const ConvProblem& p, const Rows<Half16>& x, const Rows<Half16>& dy, const OutSpec& dw,
                         const CpuExecutor& ex) {
    wgrad_parts(p, dw, ex, [&](const Chunks& ch, const PartSink& parts) {
      if (dw33(p) && p.sw == 1) wgrad_dw33<1, Half16>(p, ch, x, dy, parts, ex);
      else if (dw33(p)) wgrad_dw33<2, Half16>(p, ch, x, dy, parts, ex);
      else if (wide_dw(p)) wgrad_dense<WI, WW, false, Half16>(p, ch, x, dy, parts, ex);
      else wgrad_dense<TI, NV, false, Half16>(p, ch, x, dy, parts, ex);
    });
  }

  static void wgrad(const ConvProblem& p, const Rows<T>& x, const Rows<T>& dy, const OutSpec& dw, const CpuExecutor& ex) {
    wgrad_parts(p, dw, ex, [&](const Chunks& ch, const PartSink& parts) {
      if (dw33(p) && p.sw == 1) wgrad_dw33<1, T>(p, ch, x, dy, parts, ex);
      else if (dw33(p)) wgrad_dw33<2, T>(p, ch, x, dy, parts, ex);
      else if (Base::depthwise(p)) wgrad_dw(p, ch, x, dy, parts, ex);
      else if (Base::grouped_lanes(p, true)) wgrad_grouped_rows(p, ch, x, dy, parts, ex);
      else if (p.G == 1 && p.dw == 1 && p.Cg < TI && p.KW > 1) wgrad_joint(p, ch, x, dy, parts, ex);
      else if (wide_dw(p)) {
        if (sub_runs(p, ch)) wgrad_dense_subruns<WI, WW>(p, ch, x, dy, parts, ex);
        else wgrad_dense<WI, WW>(p, ch, x, dy, parts, ex);
      } else if (sub_runs(p, ch)) {
        wgrad_dense_subruns<TI, NV>(p, ch, x, dy, parts, ex);
      } else {
        wgrad_dense<TI, NV>(p, ch, x, dy, parts, ex);
      }
    });
  }

  static void bgrad(const ConvProblem& p, const Rows<T>& dy, const OutSpec& db, const CpuExecutor& ex) {
    const i64 F = p.Co;
    const Chunks ch = reduction_chunks(p.R(), F);
    if (ch.P == 0) {
      for (i64 o = 0; o < F; ++o) db.put(o, T(0));
      return;
    }
    Workspace<T> parts(ex, ch.P * F);  // every part written before combine() reads it
    const i64 nb = ceil_div(F, kLanes);
    ex.parallel_for(ch.P * nb, ch.L * kLanes, [&](i64 u0, i64 u1) {
      FpEnv guard;
      alignas(64) T tmp[kLanes];
      for (i64 u = u0; u < u1; ++u) {
        const i64 b = u % nb, k = u / nb, o0 = b * kLanes;
        Vec s = V::zero();
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

};
