// Every kernel entry point, CPU and GPU. Glue code (the TensorFlow ops, the
// pybind module) includes this header and nothing below it; kernels implement
// it. Pointers are raw device or host buffers of the problem's dtype; x and y
// shaped tensors use the problem's layout, filters are HWIO, bias/db are [Co].
//
//   Fprop:  y[n,oh,ow,o]  = sum_{kh,kw,i} x[n, oh*sh+kh*dh-pt, ow*sw+kw*dw-pl, g*Cg+i] * f[kh,kw,i,o] (+ b[o])
//   Dgrad:  dx[n,ih,iw,c] = sum_{kh,kw,o in g} dy[n, (ih+pt-kh*dh)/sh, (iw+pl-kw*dw)/sw, o] * f[kh,kw,c%Cg,o]
//   Wgrad:  dw[kh,kw,i,o] = sum_{n,oh,ow} x[n, oh*sh+kh*dh-pt, ow*sw+kw*dw-pl, g*Cg+i] * dy[n,oh,ow,o]
//   Bgrad:  db[o]         = sum_{n,oh,ow} dy[n,oh,ow,o]
// in the order of detconv/order.h.
#pragma once
#include <cstddef>
#include <functional>
#include "detconv/problem.h"

namespace detconv {

// ------------------------------------------------------------------ CPU
// Runs fn(begin, end) over [0, units) in any partition on any threads. Kernels
// partition over outputs or dw chunks only, so the partition cannot change bits.
struct CpuExecutor {
  virtual ~CpuExecutor() = default;
  virtual void parallel_for(i64 units, i64 cost_per_unit, const std::function<void(i64, i64)>& fn) const = 0;
  // Threads parallel_for may use: kernels that split work into one share per
  // thread size it by this (a schedule choice, never a bit).
  virtual int threads() const = 0;
  // Scratch memory from the framework's allocator, valid while the executor
  // lives (the dw/db chunk parts); nullptr: the kernel allocates its own.
  virtual void* scratch(i64 bytes) const { return nullptr; }
};

enum class CpuIsa : int { kAuto = -1, kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
bool cpu_isa_supported(CpuIsa isa);
// Forces an ISA path (kAuto: best supported; env DETCONV_CPU_ISA=scalar|avx2|avx512
// sets the initial choice). Returns false if the machine lacks it or the build
// does not hold it (DETCONV_CPU_ISAS, cmake/cpu_isas.cmake).
bool cpu_isa_force(CpuIsa isa);
CpuIsa cpu_isa_active();
const char* cpu_isa_name(CpuIsa isa);

// Measured float32 FMA peak of the active path, GFLOP/s, on `threads` threads
// at once (for reporting kernels' fraction of peak).
double cpu_fma_peak_gflops(int threads);

// Every kernel, CPU and GPU, takes one, two or three spatial dimensions (a
// 2-D problem is depth 1, a 1-D one height 1 too).
void fprop_cpu(const ConvProblem& p, const void* x, const void* f, const void* bias, void* y, const CpuExecutor& ex);
void dgrad_cpu(const ConvProblem& p, const void* dy, const void* f, void* dx, const CpuExecutor& ex);
void wgrad_cpu(const ConvProblem& p, const void* x, const void* dy, void* dw, const CpuExecutor& ex);
void bgrad_cpu(const ConvProblem& p, const void* dy, void* db, const CpuExecutor& ex);

// ------------------------------------------------------------------ GPU
// Implemented in cuda/ when built with CUDA. Each returns nullptr on success
// or a static error message. `stream` is a cudaStream_t. Workspaces are device
// buffers of at least the returned size in bytes.
bool gpu_built();
std::size_t wgrad_gpu_workspace_bytes(const ConvProblem& p);
std::size_t bgrad_gpu_workspace_bytes(const ConvProblem& p);
const char* fprop_gpu(const ConvProblem& p, const void* x, const void* f, const void* bias, void* y, void* stream);
const char* dgrad_gpu(const ConvProblem& p, const void* dy, const void* f, void* dx, void* stream);
const char* wgrad_gpu(const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace, void* stream);
const char* bgrad_gpu(const ConvProblem& p, const void* dy, void* db, void* workspace, void* stream);

}  // namespace detconv
