// What every CPU kernel shares, written once over a vector type V (simd_*.h)
// and compiled once per ISA inside its own namespace (kernels_*.cc): the
// vector and block sizes, the register-blocked inner loop, output rounding,
// unit counting, and input re-layouts. Each computation is its own struct on
// top of this one (fprop_impl.h, dgrad_impl.h, wgrad_impl.h). Every kernel
// vectorizes across outputs (output channels, input channels, or dw elements)
// and blocks several output pixels / taps in registers; each lane folds
// exactly one output in the order of detconv/order.h, so ISA, block shape and
// threads never change bits.
//
// Inputs arrive canonicalized by dispatch.cc: x and dy NHWC, f HWIO, all in
// the accumulator type, each readable kPad elements past its end.
//
// Names: Vec is the ISA's vector of kLanes accumulators; NP (a template
// parameter) is the number of output pixels in a register block, NV the
// number of vectors per pixel, BW = kLanes * NV the channels of a block.

// Tile shapes an ISA names for wide groups (V::Wide: {pixels or input
// channels, vectors} per pass, {0, 0} for none; only the float32 paths name
// any: AVX-512 for every pass and the 1x1 GEMM, AVX2 for the forward and the
// input gradient; kDxMin: the narrowest block an input-gradient row may end with;
// kFwdPastL2: a narrower forward tile for filters whose kFwd block is past L2).
template <class V, class = void>
struct WideTiles {
  struct None { static constexpr int kFwd[2] = {0, 0}, kFwdPastL2[2] = {0, 0}, kDw[2] = {0, 0}, kDx[2] = {0, 0}, kDxMin = 0, kGemm[2] = {0, 0}; };
  using Tile = None;
};
template <class V>
struct WideTiles<V, std::void_t<typename V::Wide>> {
  using Tile = typename V::Wide;
};

// The MXCSR rounding field a vector type's arithmetic runs under (V::kMxcsrRounding; else
// round-to-nearest). Only AVX2's binary16 lanes ask for one (round down: simd_avx2.h).
template <class V, class = void>
struct MxcsrRounding : std::integral_constant<unsigned, 0> {};
template <class V>
struct MxcsrRounding<V, std::void_t<decltype(V::kMxcsrRounding)>>
    : std::integral_constant<unsigned, V::kMxcsrRounding> {};

template <class V>
struct KernelBase {
  // The ISA's wide tiles (V::Wide), per pass; {0, 0}: none for that pass.
  using WideTile = typename WideTiles<V>::Tile;
  static constexpr bool kWideFwd = WideTile::kFwd[0] > 0, kWideDx = WideTile::kDx[0] > 0, kWideDw = WideTile::kDw[0] > 0,
                        kWideGemm = WideTile::kGemm[0] > 0;
  using T = typename V::T;
  using Vec = typename V::R;
  // What every shard opens with: subnormals honoured, V's rounding (FpEnvGuard).
  struct FpEnv : FpEnvGuard {
    FpEnv() : FpEnvGuard(MxcsrRounding<V>::value) {}
  };
  static constexpr int kLanes = V::L, PW = V::kPW, NV = V::kNV, BW = kLanes * NV;
  static constexpr int TI = V::kTI;  // input channels per dense dw register tile
  static constexpr int PF = V::kPF;  // output pixels per dense forward register block
  static constexpr int PG = V::kPG;  // output pixels per 1x1 GEMM forward register block (and dense, rows allowing)
  static constexpr int PD = V::kPD;  // output pixels per dense input-gradient register block
  // Vectors per depthwise 3x3 block (forward and dx): one 64-byte vector, or two 32-byte ones, so a
  // block writes whole cache lines per pixel (AVX2, one thread: 3x3 28x28x192 fwd 1.6 -> 1.15 ms,
  // dx 1.87 -> 1.24 ms; 56x56x144 dx 4.5 -> 3.7 ms).
  static constexpr int DW3W = sizeof(Vec) >= 64 ? 1 : 2;
  // Depthwise column sweeps (forward and input gradient: each input or dy column loaded once per filter
  // row and fed to every output of the block that meets it) for these filter widths, with width stride
  // 1 or 2 and no width dilation; other widths take the per-tap blocks. Wider filters sweep one vector,
  // so a row's KW filter vectors stay in registers beside the block's accumulators (AVX2: 16 registers).
  static constexpr bool dw_sweep_width(i64 kw) { return kw == 3 || kw == 5 || kw == 7; }
  // The depthwise-like problems whose shape the sweeps take (the callers add their channel conditions).
  // Not on the scalar path (V::kDwSweeps): its fixed-size lane arrays, unrolled into the sweeps' 12
  // instantiations per pass and type, were 80% of its compile (one core: 254 -> 53 s without them), and
  // its per-tap blocks ran as fast (two threads, batch 4, fastest of 15 calls over three processes each,
  // ms: 3x3 112x112x32 forward 29.2 -> 25.8, input gradient 33.0 -> 29.5; 56x56x144 26.4 -> 30.1,
  // 33.8 -> 34.0; 5x5 28x28x240 32.1 -> 37.7, 37.2 -> 36.5; 7x7 56x56x96 102.8 -> 96.4, 109.5 -> 95.1).
  static bool dw_sweeps(const ConvProblem& p) {
    return V::kDwSweeps && dw_sweep_width(p.KW) && p.dw == 1 && (p.sw == 1 || p.sw == 2);
  }
  static constexpr int dw_sweep_vectors(int kw) { return kw == 3 ? DW3W : 1; }
  // Output pixels per width-stride-1 sweep block (forward and input gradient): 8 vectors of accumulators;
  // with 16 registers (AVX2) 7 pixels for 5- and 7-wide filters, where 8 accumulators, KW filter vectors
  // and the column left GCC spilling (7x7 interior blocks: 11 stack accesses per 56 fmas) and rows of
  // 14, 28 and 56 ran 8-pixel blocks past their ends. Batch 8, two threads, Intel Xeon, ms: in one
  // process, calls alternating, 7x7 56x56x96 forward 9.32, 7.73, 8.67 -> 8.52, 7.24, 8.04; 5x5 28x28x240
  // forward 2.63, 2.62, 2.82 -> 2.47, 2.48, 2.59; 5x5 14x14x672 input gradient 2.48, 2.15, 1.96 -> 1.40,
  // 1.55, 1.56; 7x7 28x28x96 input gradient 1.20, 1.11, 1.06 -> 1.01, 1.06, 0.98; through TensorFlow's
  // ops (benchmarks/cpu.py, three runs each, oneDNN capped to AVX2), 7x7 56x56x96 forward 0.58, 0.81,
  // 0.75 -> 1.01, 0.93, 1.05 of oneDNN, input gradient 0.55, 0.67, 0.56 -> 0.72, 0.63, 0.59.
  static constexpr int dw_sweep_pixels(int kw) { return sizeof(Vec) < 64 && kw >= 5 ? 7 : 8 / dw_sweep_vectors(kw); }
  // fn(std::integral_constant<int, KW>) for a width that dw_sweep_width accepts.
  template <class Fn>
  static void with_dw_sweep_width(i64 kw, Fn&& fn) {
    if constexpr (V::kDwSweeps) {  // (none instantiated without them)
      if (kw == 3) fn(std::integral_constant<int, 3>());
      else if (kw == 5) fn(std::integral_constant<int, 5>());
      else fn(std::integral_constant<int, 7>());
    }
  }
  // Packed filters past this many bytes no longer stream well from L2 (per channel block: the forward
  // pass's memory tile; a whole 1x1 filter: its GEMM path).
  static constexpr i64 kFilterL2Bytes = i64(512) << 10;
  static constexpr bool filter_block_in_l2(i64 taps, i64 channels) {
    return taps * channels * i64(sizeof(T)) <= kFilterL2Bytes;
  }
  // Whether the dense forward's units should take one channel block's filter over consecutive rows
  // (rows innermost) rather than every channel block over one row: when the filter together with the
  // input rows one output row reads outgrows L2, so that each row would fetch the filter again from L3
  // or memory, and the block's share of the filter outweighs those rows. Capped at the 1 MiB first
  // measured (AVX-512, 3x3 7x7x512) so that larger L2s keep that choice. AVX2, AMD Zen 3 (512 KiB L2),
  // in one process, median / 20th percentile ms over 21-30 runs: C3D 3x3x3 block (batch 2) 120.3 /
  // 118.8 -> 114.9 / 113.8 and 143.5 / 122.1 -> 127.5 / 115.2 (tf.nn 112.2, 124.9), one thread 244.7 /
  // 234.8 -> 238.0 / 226.2; 3x3 28x28x128 (batch 8) 10.61 / 10.53 -> 10.37 / 10.31, one thread 25.1 /
  // 22.2 -> 24.1 / 21.5; 3x3 56x56x64 (147 KiB, unchanged) 0.4% slower rows inner. The input gradient
  // keeps its 1 MiB rule: rows inner, its C3D block gained 2-4% on two threads and nothing on one, and
  // its 3x3 28x28x128 lost 10-15% on one thread (its dy rows then pass once per channel block).
  static bool rows_inner_pays(i64 filter_values, i64 row_values, i64 block_values) {
    return filter_and_rows_past_l2(filter_values, row_values) && block_values > row_values;
  }
  // Whether a filter with the rows one output row reads outgrows L2 (the core's, counted up to 1 MiB).
  static bool filter_and_rows_past_l2(i64 filter_values, i64 row_values) {
    const i64 l2 = std::min(l2_cache_bytes(), i64(1) << 20);
    return (filter_values + row_values) * i64(sizeof(T)) > l2;
  }
  // Whether `channels` output channels suit blocks of `block` lanes (the wide forward and GEMM tiles):
  // whole blocks, or a last partial block whose empty lanes cost at most 1/16 more fmas (Xception's 728
  // channels: 12 blocks of 64, 40 empty lanes in 768).
  static bool fills_blocks(i64 channels, i64 block) {
    return channels >= block && (ceil_div(channels, block) * block - channels) * 16 <= channels;
  }
  // Dense forward folds whose (kw, i) runs are shorter than kPatchRun values gather each pixel block's
  // taps first (fprop_dense), on AVX2 only: its 6x2 block folds a 21-value run in ~130 cycles, so a call's
  // fixed costs weigh; AVX-512's 8x2 block takes ~340 and measured -1% to +2% (stem 7x7/2 224, four runs).
  static constexpr bool kPatches = PG > PF;
  static constexpr i64 kPatchRun = 48;
  // Narrowest block RowBlocks may end a row with (3 pixels x NV vectors: 6 fma chains).
  static constexpr int kTailMin = 3;
  // Forward rows `width` pixels wide take PG-pixel blocks ended by narrower
  // ones (RowBlocks<PG, kTailMin>) where the ISA's PG block is the larger
  // (AVX2: 12 fma chains against the 4-pixel blocks' 8) and whole PG blocks
  // would fold more than 1/16 of the row past its end. Two threads, batch 8,
  // in one process, AVX2: 3x3 14x14x256 10.46 -> 9.14 ms, 28x28x128 9.65 ->
  // 9.19, 56x56x64 9.63 -> 9.38, 7x7x512 11.59 -> 11.24, C3D 3x3x3 16x56x56x64
  // 103.7 -> 99.6. Not past 1/16: the stem 7x7/2 (112 wide) lost 5% to its
  // last block's 4 pixels, 3x3 112x112 32->64 even. (The input gradient
  // takes them on every row: DgradKernels::dgrad_tail_blocks.)
  static bool tail_blocks(i64 width) {
    return PG > PF && (ceil_div(width, PG) * PG - width) * 16 > width;
  }
  // Rows of 7, 14 or 28 pixels (not a multiple of 8) fit whole 7-pixel blocks where blocks (np) are 8 wide.
  static constexpr bool sevens(i64 width, int np) { return np == 8 && width % 8 != 0 && width % 7 == 0; }

  // True when pixel r of x and of its output is pixel r of the flat image: a
  // 1x1 filter, stride 1, no padding (every position inside). With one group,
  // the forward pass and input gradient are then one GEMM (fprop_1x1); the
  // filter gradient folds x and dy in place (wgrad_impl.h).
  static bool flat_pixels(const ConvProblem& p) {
    return p.KH == 1 && p.KW == 1 && p.sh == 1 && p.sw == 1 && p.pt == 0 && p.pl == 0 && p.OH == p.H && p.OW == p.W;
  }

  // Depthwise-like (Cg == 1, fewer output channels per group than lanes): the forward pass and filter
  // gradient put lanes over output channels across groups (fprop_dw, wgrad_dw).
  static bool depthwise(const ConvProblem& p) { return p.Cg == 1 && p.Cog() < kLanes; }
  // Grouped layers whose output channels are too few per group to fill a vector (ResNeXt's 4): lanes
  // across groups, each group's Cg input values in reach of one lane permute (FpropKernels::fprop_grouped,
  // WgradKernels::wgrad_grouped). `whole`: a vector of one group's channels counts too (the filter
  // gradient's choice; the forward's dense blocks of one vector were faster there).
  static bool grouped_lanes(const ConvProblem& p, bool whole = false) {
    const i64 cog = p.Cog();
    return p.G > 1 && p.Cg > 1 && (cog < kLanes || (whole && cog == kLanes)) && kLanes % cog == 0 && p.Cg <= cog;
  }
  // The lane permute tables of lanes across groups: lane l belongs to group l / per_group of the vector,
  // whose values start at (l / per_group) * stride; row k's table picks value min(k, live - 1) of them
  // (rows past `live` repeat the last, for tiles of more rows than values). rows x kLanes entries.
  static std::vector<std::int32_t> group_lane_table(i64 per_group, i64 stride, i64 rows, i64 live) {
    std::vector<std::int32_t> idx(rows * kLanes);
    for (i64 k = 0; k < rows; ++k)
      for (int l = 0; l < kLanes; ++l) idx[k * kLanes + l] = std::int32_t(l / per_group * stride + std::min(k, live - 1));
    return idx;
  }

  // Whether out can take whole-vector non-temporal stores at every (n, d, h, w) pixel and every channel
  // offset that is a multiple of kLanes: its own accumulator type (or 16-bit values rounded from
  // float lanes), channels contiguous, and the base and pixel strides vector-aligned. Worth it once
  // out is larger than the cache it would otherwise pass through (write-allocate reads each line
  // before writing it).
  // Whether out holds the lanes' own type (float32 for float lanes, float64 for double), or a 16-bit
  // type that float lanes are rounded to (float16, bfloat16).
  static bool native_out(const OutSpec& out) { return out.dtype == (sizeof(T) == 8 ? DType::kFloat64 : DType::kFloat32); }
  static bool half_out(const OutSpec& out) {
    return sizeof(T) == 4 && (out.dtype == DType::kFloat16 || out.dtype == DType::kBFloat16);
  }
  static bool streamable(const OutSpec& out, i64 elems) {
    // 4 MiB: past a core's L2 on the machines measured. Depthwise layers, batch 8, two threads, against
    // 32 MiB: 3x3 112x112x32 dx 2.13 -> 1.81 ms and forward 1.75 -> 1.56 ms, 56x56x144 dx 2.57 -> 1.86 ms
    // and forward 2.72 -> 2.05 ms (AVX-512; AVX2 alike). A consumer then reads the output from memory
    // rather than L3; in TensorFlow's pipelines the next layer rarely finds a 4 MiB+ tensor in L2 anyway.
    // Dense forward and dx outputs stream too (measured there: 1x1 layers 5-33% faster, 3x3 unchanged).
    constexpr i64 kStreamBytes = i64(4) << 20;
    const i64 a = sizeof(Vec) / sizeof(T);
    const bool native = native_out(out), half = half_out(out);
    const i64 bytes = native ? i64(sizeof(T)) : 2;  // per element of out
    return (native || half) && out.s.c == 1 && aligned_to(out, a * bytes, bytes) && elems * bytes >= kStreamBytes;
  }
  // Whether out's base and every pixel's first element (elements `elem_bytes` wide) lie on `bytes`
  // boundaries: whole vectors (streamable), or whole 64-byte lines (fprop_1x1's staged 16-bit lines).
  static bool aligned_to(const OutSpec& out, i64 bytes, i64 elem_bytes) {
    const i64 e = bytes / elem_bytes;
    return reinterpret_cast<std::uintptr_t>(out.base) % bytes == 0 && out.s.w % e == 0 && out.s.h % e == 0 &&
           out.s.d % e == 0 && out.s.n % e == 0;
  }
  // One vector of float lanes rounded to out's 16-bit type (float16 or bfloat16) at dst.
  static void store16(const OutSpec& out, std::uint16_t* dst, Vec v) {
    if (out.dtype == DType::kFloat16) V::store_half(dst, v);
    else V::store_bf16(dst, v);
  }
  // One whole vector to out at base through a non-temporal store (put_lanes with `stream`).
  static void stream_vector(const OutSpec& out, Vec v, i64 base) {
    if constexpr (sizeof(T) == 4) {
      if (half_out(out)) {  // rounded as put_lanes, then streamed
        alignas(64) std::uint16_t h[kLanes];
        store16(out, h, v);
        V::stream16(static_cast<std::uint16_t*>(out.base) + base, h);
        return;
      }
    }
    V::stream(static_cast<T*>(out.base) + base, V::canon(v));
  }

  // Writes lanes [0, n) of a vector block to out.put(base + lane*stride).
  // v by value: taking an accumulator's address would pin it to memory and spill in the hot loop.
  // stream (only where streamable(out), base a multiple of kLanes): whole vectors leave through a
  // non-temporal store; a thread's streamed stores are fenced (V::fence) before its shard ends.
  // Out of line and cold: the blocks' whole vectors of a channels-contiguous out go out through
  // BlockOut::put without it; what comes here is a block's last channels, a strided out (NCHW) or a
  // store per row end or per chunk. Inlined into every unrolled store of every depthwise block, it was
  // half of the AVX2 object's code (its per-element dtype switch) and a third of that file's compile
  // (335 -> 220 s of one core).
  __attribute__((noinline, cold)) static void put_lanes(const OutSpec& out, Vec v, i64 base, i64 stride, i64 n,
                                                       bool stream = false) {
    if (stream && n >= kLanes) {
      stream_vector(out, v, base);
      return;
    }
    if (stride == 1 && native_out(out)) {
      T* dst = static_cast<T*>(out.base) + base;  // common case: no dtype switch per element
      if (n >= kLanes) {
        V::store(dst, V::canon(v));
      } else {
        alignas(64) T tmp[kLanes];
        V::store(tmp, V::canon(v));
        for (i64 l = 0; l < n; ++l) dst[l] = tmp[l];
      }
      return;
    }
    if constexpr (sizeof(T) == 4) {
      if (half_out(out)) {  // 16-bit outputs: vector rounding
        std::uint16_t* dst = static_cast<std::uint16_t*>(out.base) + base;
        alignas(64) std::uint16_t h[kLanes];
        std::uint16_t* to = stride == 1 && n >= kLanes ? dst : h;  // whole vectors straight out, else scattered
        store16(out, to, v);
        if (to == h)
          for (i64 l = 0; l < n && l < kLanes; ++l) dst[l * stride] = h[l];
        return;
      }
    }
    alignas(64) T tmp[kLanes];
    V::store(tmp, v);
    for (i64 l = 0; l < n && l < kLanes; ++l) out.put(base + l * stride, tmp[l]);
  }

  // put_lanes for a shard's blocks, with out, the bias and the stream choice in the shard's own
  // variables: reached through a lambda's captures by reference, GCC reloaded them around every vector
  // store (which may alias them, as far as it knows), with the bias test and the offset's multiplies.
  // Whole vectors of out's own type, channels contiguous, go straight out; the rest take put_lanes.
  // Against put_lanes per vector, AVX2, batch 8, two threads, in one process, tf.nn alongside, ms:
  // depthwise forward 3x3 112x112x32 2.52 -> 2.36, 3.02 -> 2.88; 56x56x144 3.66 -> 3.51, 3.04 -> 2.85;
  // 3x3/2 112x112x96 3.17 -> 2.89; AVX-512 2-5%. The 1x1 GEMM's outputs: AVX-512 2-5% (56x56 256->64
  // dx 3.80 -> 3.62), AVX2 within 2%.
  struct BlockOut {
    OutSpec out;
    Strides4 s;     // out.s
    const T* bias;  // per channel (whole vectors readable), or null
    bool stream, whole, half;  // half: a 16-bit out, channels contiguous
    BlockOut(const OutSpec& o, bool stream_, const T* bias_)
        : out(o), s(o.s), bias(bias_), stream(stream_),
          whole(o.s.c == 1 && native_out(o)),
          half(o.s.c == 1 && half_out(o)) {}
    // The vector of channels [ch, ch + kLanes) (those below Co) at offset off, plus the bias. Whole
    // vectors of a 16-bit out are rounded here too, not in a call of put_lanes (AVX2, AMD Zen 4: 10% of
    // the float16 depthwise 5x5 28x28x240 forward's time was that call).
    void put(Vec v, i64 off, i64 ch, i64 Co) const {
      if (bias) v = V::add(v, V::load(bias + ch));
      if (whole && Co - ch >= kLanes) {
        T* dst = static_cast<T*>(out.base) + off;
        if (stream) V::stream(dst, V::canon(v));
        else V::store(dst, V::canon(v));
        return;
      }
      if constexpr (sizeof(T) == 4)
        if (half && Co - ch >= kLanes) {
          if (stream) return stream_vector(out, v, off);
          return store16(out, static_cast<std::uint16_t*>(out.base) + off, v);
        }
      put_lanes(out, v, off, s.c, Co - ch, stream);
    }
    // Bytes of one element of out (whole: out's own type; else, streamed, a 16-bit type), of one vector.
    int elem_bytes() const { return whole ? int(sizeof(T)) : 2; }
    int vector_bytes() const { return kLanes * elem_bytes(); }
    // put's rounding of the vector of channels [ch, ch + kLanes), all below Co, into a staging buffer
    // (LineStage) instead of out; stream_from then writes it to out at offset off, non-temporally.
    void round_to(Vec v, i64 ch, unsigned char* dst) const {
      if (bias) v = V::add(v, V::load(bias + ch));
      if constexpr (sizeof(T) == 4)
        if (!whole) return store16(out, reinterpret_cast<std::uint16_t*>(dst), v);
      V::store(reinterpret_cast<T*>(dst), V::canon(v));
    }
    // sizeof(Vec) bytes from src to out at offset off (its address sizeof(Vec)-aligned), non-temporally:
    // copied as they are (moves do not touch the bits, NaNs included), whatever out's type.
    void stream_raw(i64 off, const unsigned char* src) const {
      V::stream(reinterpret_cast<T*>(static_cast<unsigned char*>(out.base) + off * elem_bytes()),
                V::load(reinterpret_cast<const T*>(src)));
    }
    void stream_from(i64 off, const unsigned char* src) const {
      if constexpr (sizeof(T) == 4)
        if (!whole)
          return V::stream16(static_cast<std::uint16_t*>(out.base) + off, reinterpret_cast<const std::uint16_t*>(src));
      V::stream(static_cast<T*>(out.base) + off, V::load(reinterpret_cast<const T*>(src)));
    }
  };

  // The stores of blocks of NP pixels x NW vectors, channel blocks innermost (the depthwise forward and
  // input gradient). Streamed, a block narrower than a pixel's 64-byte line of out (AVX2: one vector of
  // floats, 32 bytes; a 16-bit out: 16 bytes a vector on AVX2, 32 on AVX-512) writes part of each line,
  // the next channel block the rest some hundreds of fmas later (a 7x7 block: ~350), and a part line
  // can leave the write-combining buffer alone, as a partial write. The blocks of one line are staged
  // instead, rounded as put rounds them, and stream out together once the line's last block, the pixel
  // block's last channel block or the shard's last block is in. Blocks that fill lines (or an out that
  // does not stream) go straight out, as does a last block with lanes past the channels.
  // AVX2, float32, batch 8, two threads, in one process, tf.nn alongside, ms, streamed / paired (two
  // blocks a line) / plain stores: depthwise 7x7 56x56x96 forward 13.5 / 7.5 / 8.7 (tf 7.3), dx 17.1 /
  // 5.4 / 5.9 (tf 5.2); 5x5 28x28x240 forward 3.05 / 2.74 / 4.81 (tf 3.02), dx 3.32 / 2.36 / 2.91. On
  // an AMD EPYC (Zen 4) the float32 pairs measured 5-10% slower than straight streams (7x7 dx 3.27 /
  // 2.96); kept for Intel's 2-3x. float16 outputs there, staged / straight: AVX2 3x3 112x112x32 forward
  // 2.94 / 3.48, 56x56x144 forward 2.70 / 3.18, 7x7 forward 4.09 / 4.44, the other depthwise cells within
  // 6% either way; AVX-512 within 10% either way.
  template <int NP, int NW>
  struct LineStage {
    alignas(64) unsigned char line[NP][64];
    int per;         // channel blocks per line; 1: straight out
    int vbytes;      // bytes of one vector of out
    int first = 0;   // the line slot of the first block staged
    int staged = 0;  // blocks staged from it
    i64 at = 0;      // that block's out offset at pixel 0
    LineStage(const BlockOut& out, bool stream) : vbytes(out.vector_bytes()) {
      const int block = NW * vbytes;
      per = stream && block < 64 ? 64 / block : 1;
    }
    // Block b of nb (channels from c0; Co in all) of pixels [from, to), pixel q's first channel at out
    // offset at0 + q * step. last: the shard's last block. Blocks inside the row (from 0, to NP) store
    // straight from registers, fully unrolled (a loop bounded at run time left GCC spilling the
    // accumulators); acc by reference into this always-inlined call keeps them in registers.
    inline __attribute__((always_inline)) void put(const BlockOut& out, const Vec (&acc)[NP][NW], i64 at0, i64 step,
                                                   i64 b, i64 nb, i64 c0, i64 Co, int from, int to, bool last) {
      auto each = [&](auto&& f) __attribute__((always_inline)) {
        if (from == 0 && to == NP) {
#pragma GCC unroll 16
          for (int q = 0; q < NP; ++q) f(q);
        } else {
          for (int q = from; q < to; ++q) f(q);
        }
      };
      if (per == 1 || c0 + NW * kLanes > Co) {
        if (staged) flush(out, step, from, to);
        each([&](int q) __attribute__((always_inline)) {
#pragma GCC unroll 16
          for (int j = 0; j < NW; ++j) out.put(acc[q][j], at0 + q * step + j * kLanes * out.s.c, c0 + j * kLanes, Co);
        });
        return;
      }
      const int slot = int(b % per);
      if (!staged) first = slot, at = at0;
      ++staged;
      each([&](int q) __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int j = 0; j < NW; ++j) out.round_to(acc[q][j], c0 + j * kLanes, line[q] + (slot * NW + j) * vbytes);
      });
      if (slot == per - 1 || b + 1 == nb || last) flush(out, step, from, to);
    }
    // The staged blocks out, pixel by pixel, in order. A 16-bit out's vectors are narrower than the ISA's
    // (16 or 32 bytes): where the staged bytes fill whole aligned ISA vectors at every pixel they go out
    // as those (AVX2 56x56x144 forward 3.21 -> 2.70 ms, the other cells within 5% either way).
    void flush(const BlockOut& out, i64 step, int from, int to) {
      const int n = staged * NW, eb = out.elem_bytes();
      constexpr int kVb = int(sizeof(Vec));
      const auto addr = reinterpret_cast<std::uintptr_t>(out.out.base) + std::uintptr_t(at * eb);
      if (vbytes < kVb && (n * vbytes) % kVb == 0 && addr % kVb == 0 && (step * eb) % kVb == 0) {
        for (int q = from; q < to; ++q)
          for (int k = 0; k < n * vbytes / kVb; ++k)
            out.stream_raw(at + q * step + k * (kVb / eb), line[q] + first * NW * vbytes + k * kVb);
      } else {
        for (int q = from; q < to; ++q)
          for (int k = 0; k < n; ++k) out.stream_from(at + q * step + k * kLanes, line[q] + (first * NW + k) * vbytes);
      }
      staged = 0;
    }
  };

  // Pixel blocks of one row of `ow` pixels, widths NMIN..NP: whole NP-wide blocks,
  // then at most two narrower ones that end at the row's last pixel, so no
  // block folds a pixel past the row (e.g. 56 = 8*6 + 4 + 4, 14 = 6 + 4 + 4,
  // 7 = 4 + 3). With NMIN == NP (or a row narrower than NMIN) the last NP
  // block runs past the row instead, its extra pixels reading +0, unstored.
  template <int NP, int NMIN>
  struct RowBlocks {
    i64 full;      // NP-wide blocks
    int tail[2];   // then these widths (0: none)
    explicit RowBlocks(i64 ow) : full(ow / NP), tail{0, 0} {
      const int r = int(ow % NP);
      if (r == 0) return;
      if (NMIN == NP || ow < NMIN) {
        ++full;
      } else if (r >= NMIN) {
        tail[0] = r;
      } else {  // r + NP pixels in two blocks of at least NMIN (NP + 1 >= 2 * NMIN)
        --full;
        tail[0] = (r + NP + 1) / 2;
        tail[1] = (r + NP) / 2;
      }
    }
    i64 count() const { return full + (tail[0] > 0) + (tail[1] > 0); }
    // Block k's first pixel and width.
    i64 first(i64 k) const { return k <= full ? k * NP : full * NP + tail[0]; }
    int width(i64 k) const { return k < full ? NP : tail[k - full]; }
  };
  // Calls f(std::integral_constant<int, w>) for a width w in [LO, HI].
  template <int HI, int LO, class F>
  static inline __attribute__((always_inline)) void with_width(int w, F&& f) {
    if constexpr (HI >= LO) {
      if (w == HI) f(std::integral_constant<int, HI>{});
      else with_width<HI - 1, LO>(w, f);
    }
  }

  // Filter blocks past this many bytes stream from L2 rather than sit in L1 (48 KiB on the Intel cores
  // measured, 32 KiB on AMD's): their sweeps prefetch kPrefetchAhead bytes ahead of the filter reads (PF).
  // Not lowered for AMD: the AVX2 3x3 56x56x64 input gradient's 36 KiB slices measured even with the
  // prefetch on Zen 4 (10.63 vs 10.61 ms; C3D block dx 104.9 vs 105.7). The forward's sweeps skip the
  // prefetch on AMD altogether (fprop_dense: it cost 8% of a busy Zen 3's C3D forward).
  static constexpr i64 kFilterL1Bytes = i64(48) << 10, kPrefetchAhead = 1024;
  static constexpr bool filter_past_l1(i64 values) { return values * i64(sizeof(T)) > kFilterL1Bytes; }

  // Makes v a register operand of what follows (an empty asm; no instruction), so GCC cannot fold the
  // load that made it into each fma that reads it.
  static inline __attribute__((always_inline)) void in_register(Vec& v) {
#if DETCONV_X86
    if constexpr (!__is_class(Vec)) __asm__("" : "+v"(v));  // the builtin: std::is_class_v<__m256> warns
#endif
  }
  // micro_regs' filter prefetch (PF, below): iteration i's NW vectors, kPrefetchAhead bytes on.
  template <int NW, bool PF>
  static inline __attribute__((always_inline)) void prefetch_filter(const T* w, i64 i) {
    if constexpr (PF)
      for (i64 b = 0; b < NW * i64(sizeof(Vec)); b += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(w + i * NW * kLanes) + kPrefetchAhead + b);
  }
  // The register-blocked inner loop: for i ascending, acc[q][j] = fma(x_q[i], w[i][j], acc[q][j]).
  // It works on a private copy so the accumulators never have an address (the
  // __may_alias__ vector types would otherwise force a store after every fma).
  // NW vectors per pixel (default NV); w holds kLanes * NW values per i.
  // PF: each iteration prefetches its filter lines kPrefetchAhead bytes on (a filter streaming from L2:
  // Intel's hardware prefetchers left the AVX2 3x4 tile's loads waiting on L2; batch 8, two threads, two
  // builds in alternating processes: C3D block forward 121 -> 109 and 125 -> 109 ms, dx 129 -> 111 and
  // 132 -> 111; 3x3 28x28x128 forward 11.0 -> 10.4 and 11.5 -> 10.2; AVX-512 within noise to 7%). Off for
  // the forward on AMD (fprop_dense, cpu_is_amd()).
  template <int NP, int NW = NV, bool PF = false>
  static inline __attribute__((always_inline)) void micro_regs(Vec (&r)[NP][NW], const T* const (&xp)[NP], const T* w,
                                                               i64 n) {
    if constexpr (NP < NW) {
      // Fewer pixels than vectors (AVX2's 3x4 tile): the NP broadcasts stay in registers and each filter
      // vector passes through one (12 + 3 + 1 of 16 registers, 7 loads per 12 fmas). Holding the NW
      // filter vectors needs 17, and GCC re-read two of them per pixel (11 loads); with this order
      // alone it read all twelve as fma memory operands (15 loads), hence in_register. Same fmas in the
      // same order per accumulator. AVX2, batch 8, two threads, in one process, ms: 3x3 28x28x128
      // forward 9.50 -> 9.21, 14x14x256 9.33 -> 8.89, C3D block 105.9 -> 102.0 (AMD Zen 4).
      for (i64 i = 0; i < n; ++i) {
        prefetch_filter<NW, PF>(w, i);
        Vec xv[NP];
        for (int q = 0; q < NP; ++q) xv[q] = V::bcast(xp[q][i]);
        for (int j = 0; j < NW; ++j) {
          Vec fv = V::load(w + (i * NW + j) * kLanes);
          in_register(fv);
          for (int q = 0; q < NP; ++q) r[q][j] = V::fma(xv[q], fv, r[q][j]);
        }
      }
      return;
    }
    for (i64 i = 0; i < n; ++i) {
      Vec fv[NW];
      prefetch_filter<NW, PF>(w, i);
      for (int j = 0; j < NW; ++j) fv[j] = V::load(w + (i * NW + j) * kLanes);
      for (int q = 0; q < NP; ++q) {
        const Vec xv = V::bcast(xp[q][i]);
        for (int j = 0; j < NW; ++j) r[q][j] = V::fma(xv, fv[j], r[q][j]);
      }
    }
  }
  // NP pixels s elements apart from x0 (one run of pixels): micro_regs addresses them from two bases
  // and the scaled indices s and 3s instead of NP pointers, which at NP = 8 left GCC short of general
  // registers (it kept some in vector registers and moved them back every iteration). Same fmas.
  struct PixelRun {
    const T* x0;
    i64 s;
  };
  template <int NP, int NW = NV>
  static inline __attribute__((always_inline)) void micro_regs(Vec (&r)[NP][NW], const PixelRun& xs, const T* w,
                                                               i64 n) {
    static_assert(NP <= 8, "two bases of four rows");
    const i64 s = xs.s, s3 = 3 * s;
    const T* b0 = xs.x0;
    const T* b1 = xs.x0 + 4 * s;
    for (i64 i = 0; i < n; ++i, ++b0, ++b1) {
      Vec fv[NW];
      for (int j = 0; j < NW; ++j) fv[j] = V::load(w + (i * NW + j) * kLanes);
      for (int q = 0; q < NP; ++q) {
        const T* b = q < 4 ? b0 : b1;
        const int m = q & 3;
        const Vec xv = V::bcast(m == 0 ? b[0] : m == 1 ? b[s] : m == 2 ? b[2 * s] : b[s3]);
        for (int j = 0; j < NW; ++j) r[q][j] = V::fma(xv, fv[j], r[q][j]);
      }
    }
  }
  // micro_regs on the caller's accumulators; xp: NP pixel pointers, or a PixelRun.
  template <int NP, int NW = NV, class Xs>
  static inline __attribute__((always_inline)) void micro(Vec (&acc)[NP][NW], const Xs& xp, const T* w, i64 n) {
    Vec r[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) r[q][j] = acc[q][j];
    micro_regs<NP, NW>(r, xp, w, n);
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = r[q][j];
  }
  // A run of padded taps folded into the accumulators of pixels q < end outside [lo, hi) (default: every
  // pixel) as one fma with the run's weight w (NW vectors; numerics.h, PaddedRun).
  template <int NP, int NW>
  static inline __attribute__((always_inline)) void fold_padded_run(Vec (&acc)[NP][NW], const T* w, int lo = 0,
                                                                    int hi = 0, int end = NP) {
    for (int j = 0; j < NW; ++j) {
      const Vec wv = V::load(w + j * kLanes);
      for (int q = 0; q < NP; ++q)
        if (q < end && (q < lo || q >= hi)) acc[q][j] = V::fma(V::zero(), wv, acc[q][j]);
    }
  }
  // The pixels [lo, hi) of a block that one tap of a sweep reaches: all of them, or a prefix or a suffix
  // (a tap at a row's edge). The others keep their bits (pad null: the input gradient skips such taps)
  // or take the tap's padded run as one fma with weight pad (the forward pass).
  struct TapSpan {
    int lo, hi;
    const T* pad;
  };
  // micro_regs on the pixels of span [LO, NP) or [0, NP - LO) that equals [lo, hi) (none: a span of
  // another shape, which no sweep lists), the others as TapSpan says. b is pixel lo's data, pixel q's at
  // b + off[q] - off[lo]. Spans are compile-time, so r stays in registers.
  template <int NP, int NW, int LO = 1>
  static inline __attribute__((always_inline)) void micro_edge(Vec (&r)[NP][NW], const T* b, const i64 (&off)[NP],
                                                               int lo, int hi, const T* pad, const T* w, i64 n) {
    if constexpr (LO < NP) {
      auto fold = [&](auto first_c, auto end_c) __attribute__((always_inline)) {
        constexpr int F = decltype(first_c)::value, E = decltype(end_c)::value;
        const T* xp[NP] = {};  // read for [F, E) only
        for (int q = F; q < E; ++q) xp[q] = b + (off[q] - off[F]);
        micro_span<NP, NW, F, E>(r, xp, w, n);
        if (pad) fold_padded_run(r, pad, F, E);
      };
      if (lo == LO && hi == NP) fold(std::integral_constant<int, LO>{}, std::integral_constant<int, NP>{});
      else if (lo == 0 && hi == NP - LO) fold(std::integral_constant<int, 0>{}, std::integral_constant<int, NP - LO>{});
      else micro_edge<NP, NW, LO + 1>(r, b, off, lo, hi, pad, w, n);
    }
  }
  // micro() over a list of taps (or filter rows) in one sweep, the accumulators in registers throughout:
  // tap k's pixel q folds n values from base[k] + off[q] against w[k]; a null base[k] is a run of padded
  // taps, folded as one fma with its run weight w[k] (numerics.h, PaddedRun). With spans, tap k folds
  // pixels [span[k].lo, span[k].hi) (a whole block, a prefix or a suffix: micro_edge; the others as
  // TapSpan says), base[k] then being pixel lo's data.
  template <int NP, int NW, bool PF = false>
  static inline __attribute__((always_inline)) void micro_taps(Vec (&acc)[NP][NW], const T* const* base,
                                                               const T* const* w, const i64 (&off)[NP], i64 taps,
                                                               i64 n, const TapSpan* span = nullptr) {
    Vec r[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) r[q][j] = acc[q][j];
    for (i64 k = 0; k < taps; ++k) {
      if (!base[k]) {
        fold_padded_run(r, w[k]);
        continue;
      }
      if (span && (span[k].lo > 0 || span[k].hi < NP)) {
        micro_edge<NP, NW>(r, base[k], off, span[k].lo, span[k].hi, span[k].pad, w[k], n);
        continue;
      }
      const T* xp[NP];
      for (int q = 0; q < NP; ++q) xp[q] = base[k] + off[q];
      micro_regs<NP, NW, PF>(r, xp, w[k], n);
    }
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) acc[q][j] = r[q][j];
  }
  // micro_taps as a function of its own, for callers whose loops around it are large (the input
  // gradient's blocks, the forward's edge blocks): inlined there, GCC 12 ran out of registers and
  // reloaded the 6x2 loop's pixel offsets from the stack every iteration (AVX2 C3D block dx 102.8 ms out
  // of line, 105.8 inlined). One call per block of ~10^3-10^4 fmas. The forward's interior sweep stays
  // inlined (measured even or slower out of line).
  template <int NP, int NW, bool PF = false>
  static __attribute__((noinline)) void sweep_taps(Vec (&acc)[NP][NW], const T* const* base, const T* const* w,
                                                   const i64 (&off)[NP], i64 taps, i64 n, const TapSpan* span) {
    micro_taps<NP, NW, PF>(acc, base, w, off, taps, n, span);
  }
  // One tap over the pixel blocks of a row, each block's accumulators in a memory tile of NP*NW vectors
  // (tiles + k*NP*NW*kLanes, unaligned), read before its fold and written after (a round trip through
  // memory is exact): block k folds n values from base[k] (its pixel span[k].lo's data, pixel q's at
  // base[k] + off[q] - off[lo]; null: the tap misses the block) against w over its pixels [span[k].lo,
  // span[k].hi), the others keeping their bits. The tap's filter slice stays in L1 across the row.
  template <int NP, int NW>
  static __attribute__((noinline)) void sweep_tiles(T* tiles, const T* const* base, const TapSpan* span, i64 blocks,
                                                    const i64 (&off)[NP], const T* w, i64 n) {
    for (i64 k = 0; k < blocks; ++k) {
      if (!base[k]) continue;
      T* tile = tiles + k * NP * NW * kLanes;
      const int lo = span[k].lo, hi = span[k].hi;
      const T* xp[NP];  // read for [lo, hi) only; the others point at a pixel that is
      for (int q = 0; q < NP; ++q) xp[q] = base[k] + (off[std::min(std::max(q, lo), hi - 1)] - off[lo]);
      if (lo == 0 && hi == NP) {
        micro_mem<NP, NW>(tile, xp, w, n);
        continue;
      }
      Vec r[NP][NW];
      for (int q = 0; q < NP; ++q)
        for (int j = 0; j < NW; ++j) r[q][j] = V::load(tile + (q * NW + j) * kLanes);
      micro_range<NP, NW>(r, xp, lo, hi, w, n);
      for (int q = 0; q < NP; ++q)
        for (int j = 0; j < NW; ++j) V::store(tile + (q * NW + j) * kLanes, r[q][j]);
    }
  }
  // micro() on pixels [lo, hi) only; the others' accumulators keep their
  // bits. One instantiation per span, so no pixel pays a masked fma (AVX2 3x3
  // 7x7x512 dx spent half its time on the blends of a masked version).
  template <int NP, int NW, int LO, int HI>
  static inline __attribute__((always_inline)) void micro_span(Vec (&acc)[NP][NW], const T* const (&xp)[NP],
                                                               const T* w, i64 n) {
    constexpr int K = HI - LO;
    Vec r[K][NW];
    const T* xs[K];
    for (int q = 0; q < K; ++q) {
      xs[q] = xp[LO + q];
      for (int j = 0; j < NW; ++j) r[q][j] = acc[LO + q][j];
    }
    micro_regs<K, NW>(r, xs, w, n);
    for (int q = 0; q < K; ++q)
      for (int j = 0; j < NW; ++j) acc[LO + q][j] = r[q][j];
  }
  template <int NP, int NW, int LO = 0, int HI = 1>
  static inline void micro_range(Vec (&acc)[NP][NW], const T* const (&xp)[NP], int lo, int hi, const T* w, i64 n) {
    if constexpr (LO < NP) {
      if constexpr (HI <= NP) {
        if (lo == LO && hi == HI) micro_span<NP, NW, LO, HI>(acc, xp, w, n);
        else micro_range<NP, NW, LO, HI + 1>(acc, xp, lo, hi, w, n);
      } else {
        micro_range<NP, NW, LO + 1, LO + 2>(acc, xp, lo, hi, w, n);
      }
    }
  }
  // The same on accumulators kept in a memory tile of NP*NW vectors (unaligned).
  template <int NP, int NW = NV, class Xs>
  static inline __attribute__((always_inline)) void micro_mem(T* tile, const Xs& xp, const T* w, i64 n) {
    Vec r[NP][NW];
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) r[q][j] = V::load(tile + (q * NW + j) * kLanes);
    micro_regs<NP, NW>(r, xp, w, n);
    for (int q = 0; q < NP; ++q)
      for (int j = 0; j < NW; ++j) V::store(tile + (q * NW + j) * kLanes, r[q][j]);
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
  // n values from src (T, or Half16 widened exactly) into dst, in whole vectors: the loads may run up
  // to kLanes - 1 values past (Rows' kPad), and so may the stores (the caller's buffer has room for them).
  template <class S>
  static void widen_run(const S* src, T* dst, i64 n) {
    for (i64 c = 0; c < n; c += kLanes) V::store(dst + c, V::load(src + c));
  }
  template <class S>
  static Rows<S> rows_of(const std::vector<S>& v, i64 nrows, i64 len) {
    return Rows<S>{v.data(), len, nrows - 1, v.data() + (nrows - 1) * len};
  }

  // Prefetches [base, base + bytes) a slice per call, spread over the `parts`
  // units of one output row: it brings in what the next row needs. Line
  // counts are found once per problem (no divisions per unit).
  struct SlicePrefetch {
    i64 lines, per;
    SlicePrefetch(i64 bytes, i64 parts) : lines(ceil_div(bytes, 64)), per(ceil_div(ceil_div(bytes, 64), parts)) {}
    void operator()(const void* base, i64 k) const {
      const char* c = static_cast<const char*>(base);
      for (i64 l = k * per, end = std::min(lines, l + per); l < end; ++l) __builtin_prefetch(c + l * 64);
    }
  };

  // Peak probe: 12 independent fma chains (enough to cover FMA latency x
  // throughput), iters rounds. Returns the flops done.
  static double fma_probe(i64 iters) {
    Vec a[12];
    const Vec m = V::bcast(T(0.9999999)), c = V::bcast(T(1e-7));
    for (int k = 0; k < 12; ++k) a[k] = V::bcast(T(1 + k));
    for (i64 it = 0; it < iters; ++it)
      for (int k = 0; k < 12; ++k) a[k] = V::fma(a[k], m, c);
    alignas(64) T sink[kLanes];
    Vec s = a[0];
    for (int k = 1; k < 12; ++k) s = V::add(s, a[k]);
    V::store(sink, s);
    volatile T keep = sink[0];
    (void)keep;
    return 2.0 * kLanes * 12 * double(iters);
  }

};

// What each computation's struct (FpropKernels, ...) takes from KernelBase<V>:
// a dependent base's names must be brought in by name.
#define DETCONV_KERNEL_BASE_NAMES         \
  using Base = KernelBase<V>;             \
  using typename Base::T;                 \
  using typename Base::Vec;               \
  using typename Base::FpEnv;             \
  using Base::kLanes;                     \
  using Base::PW;                         \
  using Base::DW3W;                       \
  using Base::dw_sweep_width;             \
  using Base::dw_sweep_vectors;           \
  using Base::dw_sweep_pixels;            \
  using Base::with_dw_sweep_width;        \
  using Base::NV;                         \
  using Base::BW;                         \
  using Base::TI;                         \
  using Base::put_lanes;                  \
  using Base::micro;                      \
  using Base::micro_mem;                  \
  using Base::micro_range;                \
  using Base::micro_taps;                 \
  using typename Base::TapSpan;           \
  using typename Base::PixelRun;          \
  using typename Base::BlockOut;          \
  template <int NP, int NW>               \
  using LineStage = typename Base::template LineStage<NP, NW>; \
  using Base::fold_padded_run;            \
  using typename Base::InnerCounter;      \
  using Base::repeat_channels;            \
  using Base::widen_run;                  \
  using Base::rows_of;                    \
  using typename Base::SlicePrefetch;
