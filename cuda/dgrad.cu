// dgrad_gpu: dx = conv_backprop_input(dy, f) (kernels.h); kernels in conv_igemm.cuh / conv_direct.cuh.
#include "common.cuh"
#include "conv_launch.cuh"

namespace detconv {

const char* dgrad_gpu(const ConvProblem& p, const void* dy, const void* f, void* dx, void* stream) {
  if (const char* err = gpu::check_problem(p)) return err;
  if (p.x_elems() == 0) return nullptr;
  if (dy == nullptr && p.y_elems() > 0) return "detconv dgrad_gpu: output gradient is null";
  if (f == nullptr || dx == nullptr) return "detconv dgrad_gpu: filters or input gradient is null";
  gpu::DeviceGuard guard(static_cast<cudaStream_t>(stream));
  return gpu::dispatch_num(p, [&](auto num) {
    using Num = decltype(num);
    return gpu::launch_conv<Num, true>(p, dy, f, nullptr, dx, static_cast<cudaStream_t>(stream), "dgrad_gpu");
  });
}

}  // namespace detconv
