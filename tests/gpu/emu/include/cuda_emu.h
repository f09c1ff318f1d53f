// A tiny host emulation of the CUDA features the detconv kernels use, so the
// kernels' tiling and indexing can be tested bit for bit without a GPU.
//
// Each block runs as blockDim.x cooperative fibers on one OS thread;
// __syncthreads() switches to the next fiber, and a block proceeds past a
// barrier only when every thread has reached it (a thread that exits while
// others wait is reported as a divergent barrier). __shared__ arrays are
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

// Fiber switching. swapcontext saves and restores the signal mask (a system
// call each way), which made the emulator spend 80% of its time in the kernel;
// on x86-64 a switch is the callee-saved registers, MXCSR and the x87 control
// word pushed on one stack and popped from the other (System V ABI), ucontext
// elsewhere. A fiber is made once per thread index and then runs block after
// block (fiber_loop), so starting a block costs no context set-up either.
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
#define EMU_X64_SWITCH 1
extern "C" void emu_switch_x64(void** save_sp, void* load_sp);
extern "C" void emu_fiber_start_x64();
// Weak: every translation unit that includes this header defines the same two.
// A new fiber's first switch pops the frame make_fiber wrote and returns into
// emu_fiber_start_x64, which calls the function left in r12 with rbx as its argument.
asm(R"(
  .pushsection .text
  .weak emu_switch_x64
  .type emu_switch_x64, @function
emu_switch_x64:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch_x64, .-emu_switch_x64
  .weak emu_fiber_start_x64
  .type emu_fiber_start_x64, @function
emu_fiber_start_x64:
  movq %rbx, %rdi
  call *%r12
  ud2
  .size emu_fiber_start_x64, .-emu_fiber_start_x64
  .popsection
)");
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

struct Fiber {
  Context ctx;
  std::vector<char> stack;
  int state = 0;  // 0 ready, 1 waiting at a barrier, 2 exited
  void* fake_stack = nullptr;  // AddressSanitizer's bookkeeping across switches
};

struct Scheduler {
  Context main;
  void* main_fake_stack = nullptr;
  const void* main_bottom = nullptr;
  size_t main_size = 0;
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

// AddressSanitizer is told of every stack switch (else it would take the
// fibers' frames for overflows of the heap blocks their stacks live in).
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
#else
inline void __sanitizer_start_switch_fiber(void**, const void*, size_t) {}
inline void __sanitizer_finish_switch_fiber(void*, const void**, size_t*) {}
#endif

inline void switch_context(Context& from, Context& to) {
#ifdef EMU_X64_SWITCH
  emu_switch_x64(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// From the running fiber back to the scheduler (s.cur is this fiber again on return).
inline void to_scheduler(Scheduler& s) {
  __sanitizer_start_switch_fiber(&s.fibers[s.cur].fake_stack, s.main_bottom, s.main_size);
  switch_context(s.fibers[s.cur].ctx, s.main);
  __sanitizer_finish_switch_fiber(s.fibers[s.cur].fake_stack, nullptr, nullptr);
}

inline void fiber_loop(void*) {
  Scheduler& s = sched();
  __sanitizer_finish_switch_fiber(nullptr, &s.main_bottom, &s.main_size);
  for (;;) {
    (*s.body)();
    s.fibers[s.cur].state = 2;
    to_scheduler(s);  // resumed when a later block starts
  }
}

#ifndef EMU_X64_SWITCH
inline void fiber_entry() { fiber_loop(nullptr); }
#endif

inline void make_fiber(Fiber& f) {
  f.stack.resize(256 * 1024);
#ifdef EMU_X64_SWITCH
  // the frame emu_switch_x64 pops: MXCSR and control word, r15..r12, rbx, rbp, return address
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack.data()) + f.stack.size()) & ~uintptr_t(15);
  void** frame = reinterpret_cast<void**>(top - 64);
  uint32_t csr[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
  std::memcpy(&frame[0], csr, 8);
  frame[1] = frame[2] = frame[3] = nullptr;                           // r15, r14, r13
  frame[4] = reinterpret_cast<void*>(&fiber_loop);                    // r12: the function
  frame[5] = nullptr;                                                 // rbx: its argument
  frame[6] = nullptr;                                                 // rbp
  frame[7] = reinterpret_cast<void*>(&emu_fiber_start_x64);          // return address
  f.ctx.sp = frame;
#else
  getcontext(&f.ctx.uc);
  f.ctx.uc.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc.uc_stack.ss_size = f.stack.size();
  f.ctx.uc.uc_link = nullptr;  // fiber_loop never returns
  makecontext(&f.ctx.uc, fiber_entry, 0);
#endif
}

inline void syncthreads() {
  Scheduler& s = sched();
  s.fibers[s.cur].state = 1;
  to_scheduler(s);
}

inline void run_block(unsigned block, const std::function<void()>& body) {
  Scheduler& s = sched();
  s.body = &body;
  // Never reallocated: a suspended fiber's frames must not outlive the Fiber they belong to.
  if (block > 1024) {
    std::fprintf(stderr, "emu: block of %u threads (CUDA allows 1024)\n", block);
    std::abort();
  }
  if (s.fibers.capacity() < 1024) s.fibers.reserve(1024);
  if (s.fibers.size() < block) s.fibers.resize(block);
  for (unsigned t = 0; t < block; ++t) {
    Fiber& f = s.fibers[t];
    if (f.stack.empty()) make_fiber(f);
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
      Fiber& f = s.fibers[t];
      if (f.state != 0) continue;
      s.cur = t;
      threadIdx.x = t;
      __sanitizer_start_switch_fiber(&s.main_fake_stack, f.stack.data(), f.stack.size());
      switch_context(s.main, f.ctx);
      __sanitizer_finish_switch_fiber(s.main_fake_stack, nullptr, nullptr);
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
