// GPU entry points for builds without CUDA: every call reports it.
#include "detconv/kernels.h"

namespace detconv {
namespace {
const char kNoCuda[] = "detconv was built without CUDA";
}
bool gpu_built() { return false; }
std::size_t wgrad_gpu_workspace_bytes(const ConvProblem&) { return 0; }
std::size_t bgrad_gpu_workspace_bytes(const ConvProblem&) { return 0; }
const char* fprop_gpu(const ConvProblem&, const void*, const void*, const void*, void*, void*) { return kNoCuda; }
const char* dgrad_gpu(const ConvProblem&, const void*, const void*, void*, void*) { return kNoCuda; }
const char* wgrad_gpu(const ConvProblem&, const void*, const void*, void*, void*, void*) { return kNoCuda; }
const char* bgrad_gpu(const ConvProblem&, const void*, void*, void*, void*) { return kNoCuda; }
}  // namespace detconv
