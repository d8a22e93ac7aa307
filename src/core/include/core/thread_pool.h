// A fixed pool of worker threads for data-parallel kernels.
//
// Decode runs hundreds of tiny parallel sections per token, so dispatch must cost
// microseconds: workers spin briefly on a generation counter before sleeping. A job is a
// set of n_threads work items that threads CLAIM (an atomic counter), so a worker that is
// descheduled (a busy machine, more threads than cores) never stalls a job: the calling
// thread, which always takes part, simply runs the items nobody claimed. A job therefore
// never takes longer than running it on the calling thread alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ts {

class ThreadPool {
 public:
  // `n_threads` >= 1 counts the calling thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(i, n_threads) exactly once for every i in [0, n_threads) and returns when all
  // are done. Items may run on any thread, one at a time per thread, so per-item scratch
  // indexed by i is private to the call; fn must not wait for other items. Not reentrant:
  // call only from the owning thread.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into at most n_threads contiguous chunks of at least `grain` items:
  // fn(begin, end, chunk_index).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop();
  // Claims and runs items of the job of generation `gen` until none is left.
  void drain(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<const std::function<void(int, int)>*> job_{nullptr};
  // (generation << 32) | next unclaimed item of the current job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> active_{0};  // workers inside drain()
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace ts
