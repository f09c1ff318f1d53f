// CPU registration: the kernels run on TensorFlow's intra-op thread pool,
// partitioned over outputs (or dw chunks) only.
#define EIGEN_USE_THREADS
#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#if defined(__linux__) || defined(__APPLE__)
#include <pthread.h>
#endif
#include "detconv/unit_queue.h"
#include "tf/kernel_common.h"

#include "tensorflow/core/framework/op_kernel.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace detconv_tf {

using CPUDevice = Eigen::ThreadPoolDevice;
using ThreadPool = ::tensorflow::thread::ThreadPool;
using detconv::UnitQueue;

namespace {
// Whether the calling thread is one of TensorFlow's own (its pools name their threads "tf_..."): in
// a graph or tf.function, the executor's inter-op threads run the kernels; eagerly, the user's thread
// does. Read once per thread. A schedule choice only (TfPoolExecutor::parallel_for): no bit depends on it.
bool on_tf_thread() {
#if defined(__linux__) || defined(__APPLE__)
  thread_local const bool tf = [] {
    char name[32] = {0};
    return pthread_getname_np(pthread_self(), name, sizeof name) == 0 && std::strncmp(name, "tf_", 3) == 0;
  }();
  return tf;
#else
  return false;
#endif
}

class TfPoolExecutor : public detconv::CpuExecutor {
 public:
  explicit TfPoolExecutor(OpKernelContext* ctx) : workers_(ctx->device()->tensorflow_cpu_worker_threads()), ctx_(ctx) {}
  // One task per thread, each draining a UnitQueue, where the work is worth more than one thread (by
  // Eigen's cost model, some 110k cost units; if not, one task drains it all). Called from TensorFlow's
  // executor (a graph, a tf.function, Keras' fit), the tasks go one to each intra-op thread and the
  // caller waits, as TensorFlow's oneDNN kernels schedule theirs; called eagerly (or from a pool
  // thread), the caller drains with the pool. Keras train_on_batch, batch 8, two threads, AMD Zen 3,
  // the converted model with the pool's tasks against the caller draining too, in one process, paired
  // step ratios: MobileNetV2 1.08, 1.08, 1.14 (stock / converted 0.93-0.96 -> 1.01-1.04), ResNet50
  // 1.10; single eager calls were even to 9% slower that way (their caller idles while two pool
  // threads wake up).
  void parallel_for(i64 units, i64 cost, const std::function<void(i64, i64)>& fn) const override {
    if (units <= 0) return;
    const i64 tasks = std::min<i64>(threads(), units);
    if (tasks <= 1) {
      fn(0, units);
      return;
    }
    UnitQueue queue(units, cost, tasks);
    const i64 work = saturating_product(cost, units);
    Eigen::ThreadPoolInterface* pool = workers_->workers->AsEigenThreadPool();
    if (work >= kParallelWork && on_tf_thread() && pool->CurrentThreadId() < 0) {
      // Not a pool thread (one waiting here would hold a thread its tasks may need). The wait is
      // Eigen's Barrier, as in the ParallelFor below.
      Eigen::Barrier done(static_cast<unsigned>(tasks));
      i64 scheduled = 0;
      try {
        for (; scheduled < tasks; ++scheduled)
          pool->ScheduleWithHint([&] {
            queue.drain(fn);
            done.Notify();
          }, int(scheduled), int(scheduled) + 1);
      } catch (...) {  // (std::bad_alloc) the tasks not scheduled: their share drained here
        queue.drain(fn);
        for (i64 k = scheduled; k < tasks; ++k) done.Notify();
      }
      done.Wait();
    } else {
      const i64 task_cost = saturating_product(cost, detconv::ceil_div(units, tasks));
      workers_->workers->ParallelFor(tasks, ThreadPool::SchedulingParams::Adaptive(task_cost),
                                     [&](int64_t, int64_t) { queue.drain(fn); });
    }
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
  static i64 saturating_product(i64 a, i64 b) {
    return a > std::numeric_limits<i64>::max() / b ? std::numeric_limits<i64>::max() : a * b;
  }
  // Work (in the kernels' cost units) below which one thread runs it all: where Eigen's cost model
  // (100k cycles to start, 100k per thread) gave one thread to the tasks this executor asked for.
  static constexpr i64 kParallelWork = 110000;
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
