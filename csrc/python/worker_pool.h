// Parked threads for detconv._kernels' CPU executor (kernels_module.cc). Starting a
// std::thread per parallel_for cost some 30 us each: a 1x8x8x16 convolution took
// 16 us on one thread and 83 us on two, and a call makes several parallel_fors
// (filter packing, then the kernel). These threads start once per process and
// wait for work between calls.
//
// One job at a time: the caller runs the job itself and hands it to up to
// `helpers` parked threads; a thread that wakes after the caller has finished
// skips it, so the caller never waits for a thread to wake, only for those that
// took the job to return. A second caller meanwhile (another Python thread, or a
// job calling parallel_for from inside) finds the pool busy and gets false.
// Which thread runs what is a schedule choice: no bit depends on it.
#pragma once
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

namespace detconv {

class WorkerPool {
 public:
  static constexpr int kMaxWorkers = 256;
  static constexpr int kSpinMicros = 100;

  // This process's pool. After a fork the child holds none of the parent's
  // threads: it starts its own (the parent's pool object is left behind).
  static WorkerPool& instance() {
    static std::mutex mu;
    static WorkerPool* pool = nullptr;
    static pid_t owner = 0;
    std::lock_guard<std::mutex> lock(mu);
    if (pool == nullptr || owner != getpid()) {
      pool = new WorkerPool;  // never freed: parked threads use it until the process ends
      owner = getpid();
    }
    return *pool;
  }

  // Runs job() on the calling thread and on up to `helpers` pool threads at
  // once (job must be safe to run concurrently and return without throwing);
  // returns once every thread that started it has returned. False, with
  // nothing run, if the pool is busy.
  bool run(int helpers, const std::function<void()>& job) {
    std::unique_lock<std::mutex> use(use_, std::try_to_lock);
    if (!use.owns_lock()) return false;
    grow(std::min(helpers, kMaxWorkers));
    bool sleepers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      open_ = std::min(helpers, workers_);
      closed_ = false;
      posted_.store(++generation_, std::memory_order_release);
      sleepers = sleeping_ > 0;
    }
    if (sleepers) wake_.notify_all();
    job();
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;  // threads not yet awake skip this job
    }
    // The threads that took it finish their last chunks about when the caller does: watched, not slept on.
    watch([&] { return running_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return running_.load(std::memory_order_relaxed) == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  WorkerPool() = default;

  // Spins until ready() or kSpinMicros have passed.
  template <class Ready>
  static void watch(const Ready& ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int k = 1; !ready(); ++k) {
      if (k % 64 == 0 && std::chrono::steady_clock::now() > until) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      std::this_thread::yield();
#endif
    }
  }

  // Starts threads until there are `n` (fewer if the system refuses one). Under use_.
  void grow(int n) {
    while (workers_ < n) {
      try {
        std::thread(&WorkerPool::work, this).detach();
      } catch (const std::system_error&) {
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++workers_;
    }
  }

  void work() {
    std::uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_;  // a job posted before this thread existed is not its to take
    }
    bool ran = false;  // whether this thread took the last job
    for (;;) {
      // A kernel's parallel_fors come in quick succession (filter packing, then the kernel): a thread
      // that has just run one watches for the next a while before it sleeps (waking one took longer
      // than a small layer's whole call).
      if (ran) watch([&] { return posted_.load(std::memory_order_acquire) != seen; });
      const std::function<void()>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleeping_;
        wake_.wait(lock, [&] { return generation_ != seen; });
        --sleeping_;
        seen = generation_;
        if (closed_ || open_ == 0) {  // not needed for this job (or too late): back to sleep
          ran = false;
          continue;
        }
        --open_;
        running_.fetch_add(1, std::memory_order_relaxed);
        job = job_;
      }
      (*job)();
      ran = true;
      std::lock_guard<std::mutex> lock(mu_);
      if (running_.fetch_sub(1, std::memory_order_release) == 1 && closed_) done_.notify_one();
    }
  }

  std::mutex use_;  // held by the caller whose job this is
  std::mutex mu_;   // everything below
  std::condition_variable wake_, done_;
  const std::function<void()>* job_ = nullptr;
  std::uint64_t generation_ = 0;
  std::atomic<std::uint64_t> posted_{0};  // generation_, for the threads that watch it
  std::atomic<int> running_{0};  // threads inside job_ (changed under mu_, watched without it)
  int workers_ = 0, open_ = 0, sleeping_ = 0;
  bool closed_ = true;
};

}  // namespace detconv
