// Service-level objectives: per-tier limits read from a YAML or JSON file, evaluated
// against a run's measured metrics to a PASS/FAIL verdict (the CI gate).
//
// File format (docs/bench.md):
//   ultrafast:
//     ttft_p99: 300ms        # latency metric _ percentile: at most this
//     tpot_p99: 50ms
//     error_rate: 1%         # rates: at most this (fraction or percent)
//   standard:
//     e2e_p95: 5s
//     throughput_rps: ">= 2" # throughput: at least this (">=" is the default for it)
//   overall:
//     error_rate: 0.02
// Keys are `<metric>_<stat>` with metric in ttft, itl, tpot, e2e, queue and stat in
// min, p50, p90, p95, p99, p99.9 (or p999), max, mean; or error_rate, degradation_rate,
// throughput_rps, output_tok_s, goodput_rps. Values are numbers (ms for latency) or
// strings with an optional "<=" / ">=" and a unit (ms, s, us, %).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace ts::bench {

struct SloCheck {
  std::string key;     // "ttft_p99"
  std::string metric;  // "ttft"; or "error_rate", "throughput_rps", ...
  std::string stat;    // "p99"; empty for rates and throughput
  bool at_least = false;  // ">=" (throughput); otherwise "<="
  double limit = 0;    // ms for latencies, fraction for rates, per-second for throughput
};

struct SloSpec {
  // Tier name ("overall" for the whole run) and its checks, in file order.
  std::vector<std::pair<std::string, std::vector<SloCheck>>> tiers;
  bool empty() const { return tiers.empty(); }
  // The latency limits of a tier as per-request thresholds (used for goodput): a
  // request is "good" when each latency it has is within every `<metric>_pXX` limit of
  // its tier (and of "overall"). Returns ms limits for ttft, tpot, e2e, itl (NaN = none).
  struct RequestLimits {
    double ttft_ms, tpot_ms, e2e_ms, itl_ms;
  };
  RequestLimits request_limits(const std::string& tier) const;
};

Result<SloSpec> parse_slo_text(const std::string& text);  // YAML or JSON
Result<SloSpec> load_slo_file(const std::string& path);

// One check's outcome.
struct SloResult {
  SloCheck check;
  double measured = 0;  // NaN when the metric had no data (counts as FAIL)
  bool pass = false;
};
struct TierVerdict {
  std::string tier;
  bool pass = true;
  bool missing = false;  // the SLO names a tier the run did not send
  std::vector<SloResult> results;
};

// How the evaluator reads a measured value: (tier, metric, stat) -> value or NaN.
// Kept as a callback so SLO logic does not depend on the report layout.
class MetricSource {
 public:
  virtual ~MetricSource() = default;
  virtual bool has_tier(const std::string& tier) const = 0;
  virtual double value(const std::string& tier, const std::string& metric,
                       const std::string& stat) const = 0;
};

std::vector<TierVerdict> evaluate_slo(const SloSpec& slo, const MetricSource& m);
bool all_pass(const std::vector<TierVerdict>& v);

}  // namespace ts::bench
