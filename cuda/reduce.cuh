// Bias-gradient parts, and the in-order combine of chunk parts (filter and
// bias gradients), with no atomics.
//
// bgrad_parts_kernel: one thread per (chunk, o), o fastest, folding
// bgrad_chunk_fold (add over the chunk's r ascending); consecutive threads
// read consecutive channels (NHWC) and keep several loads in flight.
// combine_kernel: each block owns W outputs; all its threads stage the parts
// of CH chunks at a time into shared memory (coalesced rows of W), double
// buffered, while W threads add them to their running sums in chunk order
// (combine_parts of order.h), then round once. Each sum is one chain of P
// adds, so with few outputs (bias gradients: F = Co) the time is the number
// of staged batches times a memory latency: narrow blocks (W = 8) stage 256
// chunks per batch instead of 64.
// combine_flat_kernel: one thread per output, for filters large enough to
// fill the GPU that way (late layers have few chunks of millions of outputs;
// a block per 32 of them spent most of its time starting up).
#pragma once
#include "common.cuh"

namespace detconv {
namespace gpu {

template <class Num, class I>
__global__ void __launch_bounds__(256)
bgrad_parts_kernel(const ConvProblem p, const Chunks chunks, const typename Num::T* __restrict__ dy,
                   typename Num::S* __restrict__ ws) {
  using S = typename Num::S;
  const I total = I(chunks.P * p.Co), S_sp = I(p.OD * p.OH * p.OW);
  const bool nhwc = p.layout == Layout::kNHWC;
  for (I e = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); e < total; e += I(gridDim.x) * I(blockDim.x)) {
    I chunk, o;
    divmod(e, I(p.Co), chunk, o);
    const I r_begin = I(chunks.begin(chunk)), r_end = I(chunks.end(chunk));
    S part = Num::zero();
    if (nhwc) {  // dy[r, o] = dy[r*Co + o]
      const typename Num::T* src = dy + (r_begin * I(p.Co) + o);
      const I len = r_end - r_begin;
      I k = 0;
      for (; k + 8 <= len; k += 8) {
        typename Num::T v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = src[(k + u) * I(p.Co)];
#pragma unroll
        for (int u = 0; u < 8; ++u) part = Num::add(part, Num::load(v[u]));
      }
      for (; k < len; ++k) part = Num::add(part, Num::load(src[k * I(p.Co)]));
    } else {  // NC(D)HW: r = n*S + s -> dy[(n*Co + o)*S + s]
      I n, s;
      divmod(r_begin, S_sp, n, s);
      for (I r = r_begin; r < r_end; ++r) {
        part = Num::add(part, Num::load(dy[(n * I(p.Co) + o) * S_sp + s]));
        if (++s == S_sp) { s = 0; ++n; }
      }
    }
    ws[e] = part;
  }
}

template <class Num, int W, int CH>
__global__ void __launch_bounds__(256)
combine_kernel(const i64 F, const Chunks chunks, const typename Num::S* __restrict__ ws,
               typename Num::T* __restrict__ out) {
  using S = typename Num::S;
  constexpr int NT = 256;
  static_assert(W <= 32 && (CH * W) % NT == 0, "one warp at most adds; every thread stages");
  __shared__ S buf[2][CH][W];
  const int tid = threadIdx.x;
  const i64 n_tiles = ceil_div(F, W);
  for (i64 tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const i64 f0 = tile * W;
    const int we = int(min64(W, F - f0));
    auto fetch = [&](int b, i64 k0) {
#pragma unroll
      for (int u = 0; u < CH * W / NT; ++u) {
        const int e = tid + u * NT, k = e / W, j = e % W;
        if (k0 + k < chunks.P && j < we) buf[b][k][j] = ws[(k0 + k) * F + f0 + j];
      }
    };
    S s = Num::zero();
    __syncthreads();  // the previous tile is done with buf
    fetch(0, 0);
    __syncthreads();
    int b = 0;
    for (i64 k0 = 0; k0 < chunks.P; k0 += CH) {
      if (k0 + CH < chunks.P) fetch(b ^ 1, k0 + CH);  // next batch in flight while the warp adds
      if (tid < we) {
        const int kc = int(min64(CH, chunks.P - k0));
        int k = 0;
        if (k0 == 0) { s = buf[b][0][tid]; k = 1; }  // s = part[0]
        for (; k < kc; ++k) s = Num::add(s, buf[b][k][tid]);
      }
      __syncthreads();
      b ^= 1;
    }
    if (tid < we) out[f0 + tid] = Num::store(s);
  }
}

template <class Num>
__global__ void __launch_bounds__(256)
combine_flat_kernel(const i64 F, const Chunks chunks, const typename Num::S* __restrict__ ws,
                    typename Num::T* __restrict__ out) {
  using S = typename Num::S;
  const i64 P = chunks.P;
  for (i64 f = i64(blockIdx.x) * blockDim.x + threadIdx.x; f < F; f += i64(gridDim.x) * blockDim.x) {
    // combine_parts: s = part[0], then s = add(s, part[k]) in chunk order; 8 loads in flight
    S s = Num::zero();
    i64 k = 0;
    for (; k + 8 <= P; k += 8) {
      S v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = ws[(k + u) * F + f];
#pragma unroll
      for (int u = 0; u < 8; ++u) s = (k + u == 0) ? v[u] : Num::add(s, v[u]);
    }
    for (; k < P; ++k) s = (k == 0) ? ws[f] : Num::add(s, ws[k * F + f]);
    out[f] = Num::store(s);
  }
}

// The combine's kernels: one thread per output, 32-wide blocks, 8-wide blocks
// (DETCONV_CUDA_TILE forces one, as for the GEMM tiles).
constexpr int kCombineConfigs = 3;

inline int choose_combine(i64 F) {
  const int forced = forced_tile(kCombineConfigs);
  if (forced >= 0) return forced;
  if (F >= kFewThreads) return 0;
  return F >= 32 * kFewThreads / 256 ? 1 : 2;  // below two 32-wide blocks per SM: 4x deeper batches
}

template <class Num>
const char* launch_combine(i64 F, const Chunks& ch, const void* ws, void* out, cudaStream_t stream, const char* where) {
  if (F <= 0) return nullptr;
  using S = typename Num::S;
  using T = typename Num::T;
  // R = 0 (no parts): every output is +0, which the combine of no parts writes.
  const S* parts = static_cast<const S*>(ws);
  T* dst = static_cast<T*>(out);
  switch (choose_combine(F)) {
    case 0: return launch(&combine_flat_kernel<Num>, grid_for(ceil_div(F, 256)), 256, stream, where, F, ch, parts, dst);
    case 1: return launch(&combine_kernel<Num, 32, 64>, grid_for(ceil_div(F, 32)), 256, stream, where, F, ch, parts, dst);
    default: return launch(&combine_kernel<Num, 8, 256>, grid_for(ceil_div(F, 8)), 256, stream, where, F, ch, parts, dst);
  }
}

template <class Num>
const char* launch_bgrad_parts(const ConvProblem& p, const Chunks& ch, const void* dy, void* ws, cudaStream_t stream,
                               const char* where) {
  const i64 total = ch.P * p.Co;
  if (total <= 0) return nullptr;
  return dispatch_index(p, [&](auto index) {
    using I = decltype(index);
    return launch(&bgrad_parts_kernel<Num, I>, grid_for(ceil_div(total, 256)), 256, stream, where, p, ch,
                  static_cast<const typename Num::T*>(dy), static_cast<typename Num::S*>(ws));
  });
}

}  // namespace gpu
}  // namespace detconv
