// CPU registration: the kernels run on TensorFlow's intra-op thread pool,
// partitioned over outputs (or dw chunks) only.
#define EIGEN_USE_THREADS
#include <algorithm>
#include <deque>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
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
    queue.rethrow_first();
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

// A kernel's C++ exception as the op's error: none may reach TensorFlow, where an eager call
// crashed in its pybind11 translation (SIGSEGV) and a graph would terminate. Past the shapes that
// the op checked, the one a kernel can throw is std::bad_alloc: a workspace (a converted input,
// a packed filter) that neither TensorFlow's allocator nor the heap could give.
template <class F>
absl::Status run_kernel(F&& kernel) {
  try {
    kernel();
    return absl::OkStatus();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("detconv: out of host memory for a CPU kernel's workspace");
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("detconv: CPU kernel failed: ") + e.what());
  }
}
}  // namespace

template <>
absl::Status Runner<CPUDevice>::fprop(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* f,
                                      const void* b, void* y) {
  return run_kernel([&] { detconv::fprop_cpu(p, x, f, b, y, TfPoolExecutor(ctx)); });
}
template <>
absl::Status Runner<CPUDevice>::dgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, const void* f, void* dx) {
  return run_kernel([&] { detconv::dgrad_cpu(p, dy, f, dx, TfPoolExecutor(ctx)); });
}
template <>
absl::Status Runner<CPUDevice>::wgrad(OpKernelContext* ctx, const ConvProblem& p, const void* x, const void* dy, void* dw) {
  return run_kernel([&] { detconv::wgrad_cpu(p, x, dy, dw, TfPoolExecutor(ctx)); });
}
template <>
absl::Status Runner<CPUDevice>::bgrad(OpKernelContext* ctx, const ConvProblem& p, const void* dy, void* db) {
  return run_kernel([&] { detconv::bgrad_cpu(p, dy, db, TfPoolExecutor(ctx)); });
}

DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, float);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, double);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, Eigen::half);
DETCONV_REGISTER_KERNELS(::tensorflow::DEVICE_CPU, CPUDevice, Eigen::bfloat16);

}  // namespace detconv_tf
