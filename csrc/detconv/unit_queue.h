// How the CPU executors (csrc/tf/cpu_kernels.cc, csrc/python/kernels_module.cc)
// share out a parallel_for: one task per thread, each taking the next chunk of
// units until none are left. A thread slowed by whatever else shares its core
// then takes fewer chunks instead of holding up the others at the end (Eigen's
// own split gave two threads 8 fixed shards: on the C3D block's forward, one
// thread waited 19-26 ms of 155 for the other in 3 of 8 calls; docs/performance.md,
// forty-third pass).
// A schedule choice only: kernels partition over outputs or dw chunks, so no
// bit depends on it.
#pragma once
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include "detconv/problem.h"

namespace detconv {

class UnitQueue {
 public:
  // Up to kChunksPerThread chunks per thread, each carrying at least kMinChunkCost
  // cost units (kernels count about one per fma lane: some 0.3 ms of work) where
  // there are at least as many chunks as threads, so a kernel's per-call setup
  // (scratch, tables, the first rows' cache misses) stays small: finer chunks made
  // small depthwise layers 5-20% slower.
  static constexpr i64 kChunksPerThread = 32;
  static constexpr i64 kMinChunkCost = i64(1) << 24;

  UnitQueue(i64 units, i64 cost_per_unit, i64 threads) : units_(units), chunk_(chunk_for(units, cost_per_unit, threads)) {}

  // Runs fn(begin, end) over the chunks no other caller has taken; any number of threads may call it at once.
  // No exception leaves it (none may leave a pool's thread): the first one fn throws is kept, every caller
  // stops taking chunks, and rethrow_first() raises it on the thread that waited for the others.
  template <class Fn>
  void drain(const Fn& fn) noexcept {
    try {
      for (i64 b; (b = next_.fetch_add(chunk_, std::memory_order_relaxed)) < units_;) fn(b, std::min(units_, b + chunk_));
    } catch (...) {
      next_.store(units_, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
  // After every drain() has returned.
  void rethrow_first() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static i64 chunk_for(i64 units, i64 cost_per_unit, i64 threads) {
    const i64 t = std::max<i64>(threads, 1);
    const i64 fine = std::max(ceil_div(units, t * kChunksPerThread), kMinChunkCost / std::max<i64>(cost_per_unit, 1));
    return std::max<i64>(1, std::min(fine, ceil_div(units, t)));  // never fewer chunks than threads
  }

  const i64 units_, chunk_;
  std::atomic<i64> next_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace detconv
