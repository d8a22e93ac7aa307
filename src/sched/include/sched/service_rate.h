// The measured rate at which a tier starts requests, smoothed over time (an EWMA with a
// time constant, so the estimate does not depend on how often steps run). Measured only
// while the tier is backlogged: with an empty queue, starts follow arrivals, not capacity.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

namespace ts::sched {

class ServiceRate {
 public:
  explicit ServiceRate(int64_t window_ns) : window_ns_(double(window_ns)) {}

  // `n_started` requests started during `dt_ns`; `backlogged`: requests were waiting.
  void observe(int64_t dt_ns, int32_t n_started, bool backlogged) {
    if (!backlogged || dt_ns <= 0) return;
    const double rate = double(n_started) * 1e9 / double(dt_ns);
    if (!measured_) {
      // The first samples are noisy; weigh them by the time they cover.
      seen_ns_ += double(dt_ns);
      starts_ += n_started;
      if (seen_ns_ * 4 < window_ns_) return;
      rate_per_s_ = double(starts_) * 1e9 / seen_ns_;
      measured_ = true;
      return;
    }
    const double w = 1.0 - std::exp(-double(dt_ns) / window_ns_);
    rate_per_s_ += w * (rate - rate_per_s_);
  }

  // Predicted wait behind n_ahead requests; nothing until measured.
  std::optional<int64_t> wait_ns(int64_t n_ahead) const {
    if (!measured_) return std::nullopt;
    if (n_ahead <= 0) return int64_t(0);
    if (rate_per_s_ <= 1e-9) return int64_t(1) << 62;  // nothing starts: unbounded
    return int64_t(double(n_ahead) / rate_per_s_ * 1e9);
  }
  std::optional<double> starts_per_s() const { return measured_ ? std::optional(rate_per_s_) : std::nullopt; }

 private:
  double window_ns_;
  bool measured_ = false;
  double seen_ns_ = 0;
  int64_t starts_ = 0;
  double rate_per_s_ = 0;
};

}  // namespace ts::sched
