// fprop_gpu: y = conv(x, f) [+ bias] (kernels.h); kernels in conv_igemm.cuh / conv_direct.cuh.
#include "common.cuh"
#include "conv_launch.cuh"

namespace detconv {

const char* fprop_gpu(const ConvProblem& p, const void* x, const void* f, const void* bias, void* y, void* stream) {
  if (const char* err = gpu::check_problem(p)) return err;
  if (p.y_elems() == 0) return nullptr;
  if (x == nullptr && p.x_elems() > 0) return "detconv fprop_gpu: input is null";
  if (f == nullptr || y == nullptr) return "detconv fprop_gpu: filters or output is null";
  gpu::DeviceGuard guard(static_cast<cudaStream_t>(stream));
  return gpu::dispatch_num(p, [&](auto num) {
    using Num = decltype(num);
    return gpu::launch_conv<Num, false>(p, x, f, bias, y, static_cast<cudaStream_t>(stream), "fprop_gpu");
  });
}

}  // namespace detconv
