// A canary's judgement (docs/gateway.md: canary): each version's requests over a sliding
// window, and the comparison of the candidate with the stable version, per tier, by the
// configured thresholds. Pure: the caller owns the clock and the windows.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/config.h"

namespace ts::gateway {

// One request a version served (or failed).
struct ReleaseSample {
  int64_t t_ns = 0;     // when it ended
  int tier = 0;         // the tier asked for
  double ttft_s = -1;   // arrival to the first byte; -1 none
  double tpot_s = -1;   // per output token after the first; -1 none
  bool error = false, timeout = false, degraded = false;
  double cost = 0;      // its share of the worker's cost
};

struct TierStats {
  int64_t n = 0;
  double ttft_p99 = -1, tpot_p99 = -1;  // -1: no samples
  double error_rate = 0, timeout_rate = 0, degradation_rate = 0;
  double cost_per_1000 = 0;
};

class ReleaseWindow {
 public:
  void add(const ReleaseSample& s);
  void prune(int64_t now_ns, int64_t window_ns);  // drops samples older than the window
  TierStats stats(int tier) const;
  size_t size() const { return samples_.size(); }
  static constexpr size_t kMaxSamples = 200000;  // a bound on memory: the oldest go first

 private:
  std::deque<ReleaseSample> samples_;
};

struct CanaryVerdict {
  enum Kind { kHold, kAdvance, kRollback } kind = kHold;
  std::vector<std::string> reasons;  // the breaches (rollback) or why it holds
  nlohmann::json compared;           // per tier: both versions' stats
};

// The candidate against the stable version, per tier with at least min_requests on both
// sides: any threshold exceeded rolls back; all within them with at least one tier
// compared advances; too few requests holds.
CanaryVerdict judge(const CanaryConfig& c, const ReleaseWindow& stable, const ReleaseWindow& canary,
                    const std::vector<std::string>& tier_names);

}  // namespace ts::gateway
