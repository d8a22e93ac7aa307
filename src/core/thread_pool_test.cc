#include "core/thread_pool.h"

#include <atomic>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace ts {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  for (int n : {1, 2, 3, 4}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> hits(n);
    for (int rep = 0; rep < 1000; ++rep) pool.run([&](int i, int nt) { EXPECT_EQ(nt, n); hits[i]++; });
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1000);
  }
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 5, 17, 1000}) {
    std::vector<std::atomic<int>> seen(size_t(n) + 1);
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) seen[size_t(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ItemsRunOnceEvenWhenThreadsOutnumberCores) {
  // 8 threads on a 2-core machine: descheduled workers must not stall or duplicate work.
  ThreadPool pool(8);
  std::vector<std::atomic<int>> hits(8);
  for (int rep = 0; rep < 2000; ++rep) pool.run([&](int i, int) { hits[i]++; });
  for (int i = 0; i < 8; ++i) EXPECT_EQ(hits[i].load(), 2000);
}

TEST(ThreadPool, WakesAfterSleeping) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  pool.run([&](int i, int) { sum += i + 1; });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // workers fall asleep
  pool.run([&](int i, int) { sum += i + 1; });
  EXPECT_EQ(sum.load(), 6);
}

}  // namespace
}  // namespace ts
