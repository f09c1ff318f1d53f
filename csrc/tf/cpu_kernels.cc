// CPU registration: the kernels run on TensorFlow's intra-op thread pool,
// partitioned over outputs (or dw chunks) only.
#define EIGEN_USE_THREADS
#include <algorithm>
#include <deque>
#include <limits>
#include "detconv/unit_queue.h"
#include "tf/kernel_common.h"

#include "tensorflow/core/framework/op_kernel.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace detconv_tf {

using CPUDevice = Eigen::ThreadPoolDevice;
using ThreadPool = ::tensorflow::thread::ThreadPool;
using detconv::UnitQueue;

namespace {
class TfPoolExecutor : public detconv::CpuExecutor {
 public:
  explicit TfPoolExecutor(OpKernelContext* ctx) : workers_(ctx->device()->tensorflow_cpu_worker_threads()), ctx_(ctx) {}
  // One task per thread, each draining a UnitQueue; Eigen's cost model still decides whether
  // the work is worth more than one thread (if not, one task drains it all).
  void parallel_for(i64 units, i64 cost, const std::function<void(i64, i64)>& fn) const override {
    if (units <= 0) return;
    const i64 tasks = std::min<i64>(threads(), units);
    if (tasks <= 1) {
      fn(0, units);
      return;
    }
    UnitQueue queue(units, cost, tasks);
    const i64 per_task = detconv::ceil_div(units, tasks);
    const i64 task_cost = cost > std::numeric_limits<i64>::max() / per_task ? std::numeric_limits<i64>::max() : cost * per_task;
    workers_->workers->ParallelFor(tasks, ThreadPool::SchedulingParams::Adaptive(task_cost),
                                   [&](int64_t, int64_t) { queue.drain(fn); });
  }
  int threads() const override { return workers_->num_threads > 0 ? workers_->num_threads : 1; }
  // TensorFlow's allocator reuses its buffers: no fresh pages (and page faults) per call.
  void* scratch(i64 bytes) const override {
    temps_.emplace_back();
    if (!ctx_->allocate_temp(::tensorflow::DT_UINT8, TensorShape({static_cast<int64_t>(bytes)}), &temps_.back()).ok())
      return nullptr;
    return temps_.back().data();
  }

 private:
  const ::tensorflow::DeviceBase::CpuWorkerThreads* workers_;
  OpKernelContext* ctx_;
  mutable std::deque<Tensor> temps_;
};
}  // namespace

template <>
absl::Status Runner<CPUDevice>::fprop(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* f,
                                      const void* b, void* y) {
  detconv::fprop_cpu(p, x, f, b, y, TfPoolExecutor(ctx));
  return absl::OkStatus();
}
template <>
absl::Status Runner<CPUDevice>::dgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, const void* f, void* dx) {
  detconv::dgrad_cpu(p, dy, f, dx, TfPoolExecutor(ctx));
  return absl::OkStatus();
}
template <>
absl::Status Runner<CPUDevice>::wgrad(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* dy, void* dw) {
  detconv::wgrad_cpu(p, x, dy, dw, TfPoolExecutor(ctx));
  return absl::OkStatus();
}
template <>
absl::Status Runner<CPUDevice>::bgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, void* db) {
  detconv::bgrad_cpu(p, dy, db, TfPoolExecutor(ctx));
  return absl::OkStatus();
}

DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, float);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, double);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, Eigen::half);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, Eigen::bfloat16);

}  // namespace detconv_tf
