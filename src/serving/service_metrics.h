// The serving layer's view of metrics/tierserve_metrics.h: every series of a tier label
// looked up once (at create), then updated with atomics from the loop thread. Without a
// registry every method is a no-op, so the loop calls them unconditionally.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "metrics/correlation.h"
#include "metrics/registry.h"
#include "sched/request.h"

namespace ts::serving {

// Outcome label values of tierserve_requests_total, in metrics::kOutcomes order.
enum class Outcome : uint8_t { kOk, kRejected, kDowngraded, kPromoted, kPreempted, kCancelled, kError, kCount };

class ServiceMetrics {
 public:
  // `tiers`: the configured tier names in priority order; the first is the "fast" side of
  // the latency correlation, the second (if any) the "standard" side.
  ServiceMetrics(metrics::Registry* reg, const std::vector<std::string>& tiers);

  void request(int tier, Outcome o);
  void tokens_in(int tier, int64_t n);
  void tokens_out(int tier, int64_t n);
  // A request served on another tier than requested, or refused (served -1: label "none").
  void degradation(int requested, int served, sched::Reason reason);
  void queue_time(int tier, int64_t ns);
  void ttft(int tier, int64_t ns);
  void tpot(int tier, int64_t ns_per_token);
  void duration(int tier, int64_t ns);
  // Per step (and when the service goes idle without one: budget_share nullopt keeps the
  // last step's share, which is what that gauge describes).
  void tier_gauges(int tier, int64_t n_queued, int64_t n_running, int64_t kv_blocks,
                   std::optional<double> budget_share);
  void priority_inversions(int64_t n);
  // A step abandoned for an interrupting tier's arrival.
  void step_interrupted();
  // A request's prompt looked up in the prefix cache, and the tokens found there.
  void prefix_cache(int64_t queried, int64_t hit);
  // A step a promoted request of an interrupting tier took past its share (Plan::exclusive_forced).
  void step_forced_exclusive();
  // The interrupting tier's wait bound, and the step cost model it comes from.
  void wait_bound(int tier, int64_t ns);
  void step_cost(double fixed_ns, double token_ns, double output_ns);
  // Draft tokens verified in a speculative step, and how many were accepted.
  void speculative(int tier, int64_t drafted, int64_t accepted);
  // Closes a correlation interval when `interval_ns` has passed since the last one.
  void tick(int64_t now_ns, int64_t interval_ns);

 private:
  struct Tier {
    metrics::Histogram *queue = nullptr, *ttft = nullptr, *tpot = nullptr, *duration = nullptr;
    metrics::Counter* outcome[size_t(Outcome::kCount)] = {};
    metrics::Counter *in = nullptr, *out = nullptr;
    metrics::Gauge *queued = nullptr, *running = nullptr, *kv = nullptr, *share = nullptr;
    metrics::Counter *drafted = nullptr, *accepted = nullptr;
  };
  metrics::Registry* reg_;
  std::vector<std::string> names_;
  std::vector<Tier> tiers_;
  metrics::Counter* inversions_ = nullptr;
  metrics::Counter* interrupted_ = nullptr;
  metrics::Counter* forced_ = nullptr;
  metrics::Counter *prefix_queries_ = nullptr, *prefix_hits_ = nullptr;
  std::vector<metrics::Gauge*> bounds_;
  metrics::Gauge* cost_[3] = {};
  metrics::Gauge* correlation_ = nullptr;
  metrics::LatencyCorrelator corr_{60};
  int64_t last_tick_ns_ = -1;
  std::map<std::tuple<int, int, sched::Reason>, metrics::Counter*> degradations_;
};

}  // namespace ts::serving
