// GPU registration of the detconv ops: the same op classes as cpu_kernels.cc
// (kernel_common.h), with Runner<GpuTag> launching the CUDA kernels of cuda/
// on TensorFlow's compute stream for the op's device. Workspaces for the
// filter and bias gradients come from TensorFlow's allocator (allocate_temp),
// whose stream-ordered reuse on the compute stream makes freeing them at the
// end of Compute safe.
//
// Compiled by the host compiler against TensorFlow's headers only: no CUDA
// header is needed here (the stream is handed over as void*), and the CUDA
// kernels themselves are built by nvcc into detconv_gpu without TensorFlow.
// Only built into the op library when CMake found CUDA (DETCONV_GPU=1).
#if DETCONV_GPU

#include <string>

#include "tf/kernel_common.h"

#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace detconv_tf {

// Device tag for Runner and the op templates: the GPU path needs no Eigen
// device (and so no EIGEN_USE_GPU / CUDA headers), only TensorFlow's stream.
struct GpuTag {};

namespace {

// TensorFlow's compute stream for this op, as a cudaStream_t.
absl::Status gpu_stream(OpKernelContext* ctx, void** stream) {
  const ::tensorflow::DeviceContext* dc = ctx->op_device_context();
  if (dc == nullptr || dc->stream() == nullptr)
    return absl::InternalError("detconv: GPU op without a device stream");
  *stream = dc->stream()->platform_specific_handle().stream;
  if (*stream == nullptr) return absl::InternalError("detconv: TensorFlow's GPU stream has no CUDA handle");
  return absl::OkStatus();
}

absl::Status launched(const char* err) {
  if (err == nullptr) return absl::OkStatus();
  return absl::InternalError(std::string(err));
}

// A device workspace of `bytes` (nullptr when none is needed).
absl::Status workspace(OpKernelContext* ctx, std::size_t bytes, Tensor* holder, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return absl::OkStatus();
  TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DT_UINT8, TensorShape({static_cast<int64_t>(bytes)}), holder));
  *ptr = holder->data();
  return absl::OkStatus();
}

}  // namespace

template <>
absl::Status Runner<GpuTag>::fprop(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* f,
                                   const void* b, void* y) {
  void* stream = nullptr;
  TF_RETURN_IF_ERROR(gpu_stream(ctx, &stream));
  return launched(detconv::fprop_gpu(p, x, f, b, y, stream));
}

template <>
absl::Status Runner<GpuTag>::dgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, const void* f,
                                   void* dx) {
  void* stream = nullptr;
  TF_RETURN_IF_ERROR(gpu_stream(ctx, &stream));
  return launched(detconv::dgrad_gpu(p, dy, f, dx, stream));
}

template <>
absl::Status Runner<GpuTag>::wgrad(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* dy,
                                   void* dw) {
  void* stream = nullptr;
  TF_RETURN_IF_ERROR(gpu_stream(ctx, &stream));
  Tensor ws;
  void* ws_ptr = nullptr;
  TF_RETURN_IF_ERROR(workspace(ctx, detconv::wgrad_gpu_workspace_bytes(p), &ws, &ws_ptr));
  return launched(detconv::wgrad_gpu(p, x, dy, dw, ws_ptr, stream));
}

template <>
absl::Status Runner<GpuTag>::bgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, void* db) {
  void* stream = nullptr;
  TF_RETURN_IF_ERROR(gpu_stream(ctx, &stream));
  Tensor ws;
  void* ws_ptr = nullptr;
  TF_RETURN_IF_ERROR(workspace(ctx, detconv::bgrad_gpu_workspace_bytes(p), &ws, &ws_ptr));
  return launched(detconv::bgrad_gpu(p, dy, db, ws_ptr, stream));
}

DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_GPU, GpuTag, float);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_GPU, GpuTag, double);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_GPU, GpuTag, Eigen::half);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_GPU, GpuTag, Eigen::bfloat16);

}  // namespace detconv_tf

#endif  // DETCONV_GPU
