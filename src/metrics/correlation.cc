#include "metrics/correlation.h"

#include <cmath>

#include "core/check.h"

namespace ts::metrics {

RollingCorrelation::RollingCorrelation(size_t window) : window_(window), xs_(window), ys_(window) {
  TS_CHECK(window >= 3);
}

void RollingCorrelation::add(double x, double y) {
  xs_[next_] = x;
  ys_[next_] = y;
  next_ = (next_ + 1) % window_;
  if (n_ < window_) ++n_;
}

std::optional<double> RollingCorrelation::value() const {
  if (n_ < 3) return std::nullopt;
  // Two passes over a small window: exact, and no drift from running sums.
  double mx = 0, my = 0;
  for (size_t i = 0; i < n_; ++i) {
    mx += xs_[i];
    my += ys_[i];
  }
  mx /= double(n_);
  my /= double(n_);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n_; ++i) {
    const double dx = xs_[i] - mx, dy = ys_[i] - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx <= 0 || syy <= 0) return std::nullopt;
  return sxy / std::sqrt(sxx * syy);
}

void LatencyCorrelator::record_fast(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  fast_sum_ += seconds;
  ++fast_n_;
}

void LatencyCorrelator::record_standard(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  std_sum_ += seconds;
  ++std_n_;
}

std::optional<double> LatencyCorrelator::close_interval() {
  std::lock_guard<std::mutex> l(mu_);
  if (fast_n_ > 0 && std_n_ > 0) corr_.add(fast_sum_ / double(fast_n_), std_sum_ / double(std_n_));
  fast_sum_ = std_sum_ = 0;
  fast_n_ = std_n_ = 0;
  return corr_.value();
}

}  // namespace ts::metrics
