// A tiny host emulation of the CUDA features the detconv kernels use, so the
// kernels' tiling and indexing can be tested bit for bit without a GPU.
//
// Each block runs as blockDim.x cooperative fibers (ucontext) on one OS
// thread; __syncthreads() switches to the next fiber, and a block proceeds
// past a barrier only when every thread has reached it (a thread that exits
// while others wait is reported as a divergent barrier). __shared__ arrays are
// function statics: blocks run one after another, so that is exact.
// Arithmetic intrinsics map to IEEE host operations (compile with
// -ffp-contract=off); binary16 arithmetic uses the exact emulation of
// detconv/numerics.h. Nothing here is used by the real build.
#pragma once
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

// Vector types the kernels move 4 elements with (alignment as on the device).
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

typedef void* cudaStream_t;
enum cudaError_t { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t) { return "cudaSuccess"; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }

inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dadd_rn(double a, double b) { return a + b; }

namespace emu {

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  int state = 0;  // 0 ready, 1 waiting at a barrier, 2 exited
};

struct Scheduler {
  ucontext_t main;
  std::vector<Fiber> fibers;
  unsigned cur = 0;
  const std::function<void()>* body = nullptr;
  long barriers = 0;
  // Order in which the fibers run between two barriers: forward, reverse, or
  // rotated, changing at every barrier, so that a read of shared memory that
  // a missing barrier leaves unordered sees a different writer order (and so
  // different bits) across phases. EMU_ORDER=forward keeps the plain order.
  unsigned phase = 0;
};
inline Scheduler& sched() {
  static Scheduler s;
  return s;
}

inline void fiber_entry() {
  Scheduler& s = sched();
  (*s.body)();
  s.fibers[s.cur].state = 2;  // uc_link returns to the scheduler
}

inline void syncthreads() {
  Scheduler& s = sched();
  s.fibers[s.cur].state = 1;
  swapcontext(&s.fibers[s.cur].ctx, &s.main);
}

inline void run_block(unsigned block, const std::function<void()>& body) {
  Scheduler& s = sched();
  s.body = &body;
  if (s.fibers.size() < block) s.fibers.resize(block);
  for (unsigned t = 0; t < block; ++t) {
    Fiber& f = s.fibers[t];
    if (f.stack.empty()) f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &s.main;
    makecontext(&f.ctx, fiber_entry, 0);
    f.state = 0;
  }
  static const bool plain = [] {
    const char* v = std::getenv("EMU_ORDER");
    return v != nullptr && std::strcmp(v, "forward") == 0;
  }();
  for (;;) {
    const unsigned mode = plain ? 0 : s.phase++ % 3, rot = block > 1 ? (s.phase * 7919u) % block : 0;
    for (unsigned k = 0; k < block; ++k) {
      const unsigned t = mode == 0 ? k : mode == 1 ? block - 1 - k : (k + rot) % block;
      if (s.fibers[t].state != 0) continue;
      s.cur = t;
      threadIdx.x = t;
      swapcontext(&s.main, &s.fibers[t].ctx);
    }
    unsigned done = 0, waiting = 0;
    for (unsigned t = 0; t < block; ++t) {
      done += s.fibers[t].state == 2;
      waiting += s.fibers[t].state == 1;
    }
    if (done == block) return;
    if (done != 0) {
      std::fprintf(stderr, "emu: divergent __syncthreads (block %u: %u exited, %u waiting)\n", blockIdx.x, done, waiting);
      std::abort();
    }
    ++s.barriers;
    for (unsigned t = 0; t < block; ++t) s.fibers[t].state = 0;
  }
}

template <class Body>
void run_grid(unsigned grid, unsigned block, const Body& body) {
  const std::function<void()> fn = body;
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx.x = b;
    run_block(block, fn);
  }
}

}  // namespace emu

inline void __syncthreads() { emu::syncthreads(); }
