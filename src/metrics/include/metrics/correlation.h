// The fast/standard latency correlation (a rise of both together is the sign of a shared bottleneck).
// Latencies of both tiers are averaged per interval (e.g. 1 s); the gauge is the Pearson
// correlation of the last `window` interval pairs. Intervals where either tier had no
// request are skipped: there is no pair to compare.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace ts::metrics {

// Pearson correlation over the last `window` (x, y) pairs. Not thread-safe.
class RollingCorrelation {
 public:
  explicit RollingCorrelation(size_t window);
  void add(double x, double y);
  size_t size() const { return n_; }
  // Nothing with fewer than 3 pairs or when either side is constant.
  std::optional<double> value() const;

 private:
  size_t window_;
  std::vector<double> xs_, ys_;
  size_t next_ = 0, n_ = 0;
};

// Per-interval means of two latency streams, fed from any thread; close_interval() from
// one (the stats ticker) pairs the means and returns the correlation.
class LatencyCorrelator {
 public:
  explicit LatencyCorrelator(size_t window) : corr_(window) {}
  void record_fast(double seconds);
  void record_standard(double seconds);
  std::optional<double> close_interval();

 private:
  std::mutex mu_;
  double fast_sum_ = 0, std_sum_ = 0;   // GUARDED_BY(mu_)
  uint64_t fast_n_ = 0, std_n_ = 0;     // GUARDED_BY(mu_)
  RollingCorrelation corr_;             // GUARDED_BY(mu_)
};

}  // namespace ts::metrics
