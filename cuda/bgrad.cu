// bgrad_gpu: db = sum of dy over (n, od, oh, ow) (kernels.h): chunk parts, then
// combined in chunk order (reduce.cuh).
#include "common.cuh"
#include "reduce.cuh"

namespace detconv {

bool gpu_built() { return true; }

std::size_t bgrad_gpu_workspace_bytes(const ConvProblem& p) {
  const Chunks ch = reduction_chunks(p.R(), p.Co);
  return std::size_t(ch.P) * std::size_t(p.Co) * gpu::accum_bytes(p);
}

const char* bgrad_gpu(const ConvProblem& p, const void* dy, void* db, void* workspace, void* stream) {
  if (const char* err = gpu::check_bgrad_problem(p)) return err;
  if (p.Co == 0) return nullptr;
  if (db == nullptr) return "detconv bgrad_gpu: bias gradient is null";
  if (p.R() > 0 && dy == nullptr) return "detconv bgrad_gpu: output gradient is null";
  gpu::DeviceGuard guard(static_cast<cudaStream_t>(stream));
  return gpu::dispatch_num(p, [&](auto num) -> const char* {
    using Num = decltype(num);
    const auto s = static_cast<cudaStream_t>(stream);
    const Chunks ch = reduction_chunks(p.R(), p.Co);
    if (ch.P > 0) {
      if (workspace == nullptr) return "detconv bgrad_gpu: workspace is null";
      if (const char* err = gpu::launch_bgrad_parts<Num>(p, ch, dy, workspace, s, "bgrad_gpu")) return err;
    }
    return gpu::launch_combine<Num>(p.Co, ch, workspace, db, s, "bgrad_gpu");
  });
}

}  // namespace detconv
