// wgrad_gpu: dw = conv2d_backprop_filter(x, dy) (kernels.h): chunk parts into the
// workspace, then combined in chunk order (reduce_tiled.cuh).
#include "common.cuh"
#include "reduce_tiled.cuh"

namespace detconv {

std::size_t wgrad_gpu_workspace_bytes(const ConvProblem& p) {
  const Chunks ch = reduction_chunks(p.R(), p.filter_elems());
  return std::size_t(ch.P) * std::size_t(p.filter_elems()) * gpu::accum_bytes(p);
}

const char* wgrad_gpu(const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace, void* stream) {
  if (const char* err = gpu::check_problem(p)) return err;
  if (dw == nullptr) return "detconv wgrad_gpu: filter gradient is null";
  if (p.R() > 0 && (x == nullptr || dy == nullptr)) return "detconv wgrad_gpu: input or output gradient is null";
  gpu::DeviceGuard guard(static_cast<cudaStream_t>(stream));
  return gpu::dispatch_num(p, [&](auto num) {
    using Num = decltype(num);
    return gpu::launch_wgrad<Num>(p, x, dy, dw, workspace, static_cast<cudaStream_t>(stream), "wgrad_gpu");
  });
}

}  // namespace detconv
