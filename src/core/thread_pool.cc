#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TS_PAUSE() _mm_pause()
#else
#define TS_PAUSE() ((void)0)
#endif

namespace ts {
namespace {
// How long an idle worker polls for the next job before sleeping: decode issues a job
// every few microseconds, so polling keeps wake-up latency off the critical path; past a
// few thousand pauses it yields so a busy machine's other threads get the core.
constexpr int kPauseSpins = 4096;
constexpr int kYieldSpins = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(uint32_t gen) {
  const uint64_t n = uint64_t(n_threads_);
  uint64_t c = claim_.load();
  for (;;) {
    if (uint32_t(c >> 32) != gen || (c & 0xffffffffu) >= n) return;
    if (claim_.compare_exchange_weak(c, c + 1)) {
      // A successful claim of generation `gen` means its job is published and the caller
      // cannot leave run() before this worker leaves drain().
      (*job_.load())(int(c & 0xffffffffu), n_threads_);
      c = claim_.load();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kYieldSpins; ++spin) {
      if (spin < kPauseSpins) TS_PAUSE();
      else std::this_thread::yield();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      g = generation_.load();
    }
    seen = g;
    if (stop_.load()) return;
    active_.fetch_add(1);
    drain(uint32_t(g));
    active_.fetch_sub(1);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  const uint64_t g = generation_.load() + 1;
  job_.store(&fn);
  claim_.store(uint64_t(uint32_t(g)) << 32);
  {
    // Publishing under the mutex pairs with the sleepers' predicate check, so no wake-up
    // is lost; polling workers see the generation change without it.
    std::lock_guard<std::mutex> lk(mu_);
    generation_.store(g);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  drain(uint32_t(g));
  // Every item is claimed; wait for the workers still running theirs.
  for (int spin = 0; active_.load() != 0; ++spin) {
    if (spin < kPauseSpins) TS_PAUSE();
    else std::this_thread::yield();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  int n_used = int(std::min<int64_t>(n_threads_, max_chunks));
  if (n_used <= 1) {
    fn(0, n, 0);
    return;
  }
  run([&](int ti, int) {
    if (ti >= n_used) return;
    int64_t per = (n + n_used - 1) / n_used;
    int64_t b = std::min<int64_t>(n, per * ti);
    int64_t e = std::min<int64_t>(n, b + per);
    if (b < e) fn(b, e, ti);
  });
}

}  // namespace ts
