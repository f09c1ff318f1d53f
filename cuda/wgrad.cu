// wgrad_gpu: dw = conv_backprop_filter(x, dy) (kernels.h): chunk parts into the
// workspace (wgrad_parts.cuh), then combined in chunk order (reduce.cuh).
#include "common.cuh"
#include "reduce.cuh"
#include "wgrad_parts.cuh"

namespace detconv {

std::size_t wgrad_gpu_workspace_bytes(const ConvProblem& p) {
  const Chunks ch = reduction_chunks(p.R(), p.filter_elems());
  return std::size_t(ch.P) * std::size_t(p.filter_elems()) * gpu::accum_bytes(p);
}

const char* wgrad_gpu(const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace, void* stream) {
  if (const char* err = gpu::check_problem(p)) return err;
  if (p.filter_elems() == 0) return nullptr;  // no output channel: nothing to write
  if (dw == nullptr) return "detconv wgrad_gpu: filter gradient is null";
  if (p.R() > 0 && (x == nullptr || dy == nullptr)) return "detconv wgrad_gpu: input or output gradient is null";
  gpu::DeviceGuard guard(static_cast<cudaStream_t>(stream));
  return gpu::dispatch_num(p, [&](auto num) -> const char* {
    using Num = decltype(num);
    const auto s = static_cast<cudaStream_t>(stream);
    const Chunks ch = reduction_chunks(p.R(), p.filter_elems());
    if (ch.P > 0) {
      if (workspace == nullptr) return "detconv wgrad_gpu: workspace is null";
      if (const char* err = gpu::launch_wgrad_parts<Num>(p, ch, x, dy, workspace, s, "wgrad_gpu")) return err;
    }
    return gpu::launch_combine<Num>(p.filter_elems(), ch, workspace, dw, s, "wgrad_gpu");
  });
}

}  // namespace detconv
