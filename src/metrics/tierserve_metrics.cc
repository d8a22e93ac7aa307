#include "metrics/tierserve_metrics.h"

#include "core/check.h"

namespace ts::metrics {
namespace {

// Request latencies: 5 ms .. 10 min (batch waits are long).
const std::vector<double> kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                             5,     10,   30,    60,   120, 300,  600};
// Per output token: 1 ms .. 1 s.
const std::vector<double> kTokenBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1};

std::vector<MetricDef> build() {
  using T = MetricType;
  std::vector<MetricDef> d(idx(Metric::kCount));
  d[idx(Metric::kQueueTime)] = {"tierserve_queue_time_seconds",
                                "Time from arrival to the first scheduled step, per tier served.",
                                T::kHistogram, {"tier"}, kLatencyBuckets};
  d[idx(Metric::kTimeToFirstToken)] = {"tierserve_time_to_first_token_seconds",
                                       "Time from arrival to the first output token.", T::kHistogram, {"tier"},
                                       kLatencyBuckets};
  d[idx(Metric::kTimePerOutputToken)] = {"tierserve_time_per_output_token_seconds",
                                         "Mean time between output tokens after the first, per request.",
                                         T::kHistogram, {"tier"}, kTokenBuckets};
  d[idx(Metric::kRequestDuration)] = {"tierserve_request_duration_seconds",
                                      "Time from arrival to the last byte of the response.", T::kHistogram, {"tier"},
                                      kLatencyBuckets};
  d[idx(Metric::kRequests)] = {"tierserve_requests_total",
                               "Requests by tier and outcome (ok, rejected, downgraded, promoted, preempted, "
                               "cancelled, error).",
                               T::kCounter, {"tier", "outcome"}, {}};
  d[idx(Metric::kTokens)] = {"tierserve_tokens_total", "Prompt (in) and generated (out) tokens.", T::kCounter,
                             {"tier", "direction"}, {}};
  d[idx(Metric::kDegradations)] = {"tierserve_degradations_total",
                                   "Requests served on another tier than requested, or refused, by reason.",
                                   T::kCounter, {"tier_requested", "tier_served", "reason"}, {}};
  d[idx(Metric::kQueuedRequests)] = {"tierserve_queued_requests", "Requests waiting to be scheduled.", T::kGauge,
                                     {"tier"}, {}};
  d[idx(Metric::kRunningRequests)] = {"tierserve_running_requests", "Requests holding KV cache.", T::kGauge,
                                      {"tier"}, {}};
  d[idx(Metric::kKvBlocksUsed)] = {"tierserve_kv_blocks_used", "KV cache blocks held by the tier's requests.",
                                   T::kGauge, {"tier"}, {}};
  d[idx(Metric::kStepBudgetShare)] = {"tierserve_step_budget_share_ratio",
                                      "Share of the last step's token budget the tier received (0..1).", T::kGauge,
                                      {"tier"}, {}};
  d[idx(Metric::kPriorityInversions)] = {"tierserve_priority_inversions_total",
                                         "Steps where a higher tier waited below its cap while a lower tier got "
                                         "more than its floor.",
                                         T::kCounter, {}, {}};
  d[idx(Metric::kLatencyCorrelation)] = {"tierserve_fast_standard_latency_correlation",
                                         "Pearson correlation of per-interval mean latency of the fastest and the "
                                         "standard tier over a rolling window (near 1: a shared bottleneck).",
                                         T::kGauge, {}, {}};
  d[idx(Metric::kStepsInterrupted)] = {"tierserve_steps_interrupted_total",
                                       "Engine steps abandoned at a layer boundary for an arriving request of an "
                                       "interrupting tier (planned again).",
                                       T::kCounter, {}, {}};
  d[idx(Metric::kSpeculativeTokens)] = {"tierserve_speculative_tokens_total",
                                        "Draft tokens of speculative decoding verified (drafted) and accepted.",
                                        T::kCounter, {"tier", "result"}, {}};
  d[idx(Metric::kHttpConnectionsOpen)] = {"tierserve_http_connections_open",
                                          "Open connections on the main listener (http.max_connections bounds it).",
                                          T::kGauge, {}, {}};
  d[idx(Metric::kHttpConnectionsRejected)] = {"tierserve_http_connections_rejected_total",
                                              "Connections answered 503 because http.max_connections were open.",
                                              T::kCounter, {}, {}};
  d[idx(Metric::kWaitBound)] = {"tierserve_wait_bound_seconds",
                                "The longest an admitted request of an interrupting tier waits behind the other tiers' "
                                "work: its max queue wait, then one step of the budget (from the measured step cost).",
                                T::kGauge, {"tier"}, {}};
  d[idx(Metric::kStepsForcedExclusive)] = {"tierserve_steps_forced_exclusive_total",
                                           "Steps a promoted request of an interrupting tier took for itself although "
                                           "its tier was past its share of the window (its max wait was over).",
                                           T::kCounter, {}, {}};
  d[idx(Metric::kStepCost)] = {"tierserve_step_cost_seconds",
                               "The measured cost model of an engine step: per step (fixed), per token computed "
                               "(token) and per output row (output), calibrated at start and kept current.",
                               T::kGauge, {"part"}, {}};
  // The model-server protocol of the Gateway API Inference Extension (its Endpoint Picker
  // reads these; metrics.vllm_names also exports them under vLLM's names).
  d[idx(Metric::kNumRequestsWaiting)] = {"tierserve_num_requests_waiting",
                                         "Requests accepted and not running yet (all tiers).", T::kGauge, {}, {}};
  d[idx(Metric::kNumRequestsRunning)] = {"tierserve_num_requests_running", "Requests holding KV cache (all tiers).",
                                         T::kGauge, {}, {}};
  d[idx(Metric::kKvCacheUsage)] = {"tierserve_kv_cache_usage_ratio",
                                   "Fraction of the KV cache's blocks held by requests (0..1; cached prefixes not counted).",
                                   T::kGauge, {}, {}};
  d[idx(Metric::kCacheConfigInfo)] = {"tierserve_cache_config_info", "The KV cache's configuration (value 1).",
                                      T::kGauge, {"block_size", "num_blocks"}, {}};
  d[idx(Metric::kPrefixCacheQueries)] = {"tierserve_prefix_cache_queries_total",
                                         "Prompt tokens looked up in the prefix cache.", T::kCounter, {}, {}};
  d[idx(Metric::kPrefixCacheHits)] = {"tierserve_prefix_cache_hits_total",
                                      "Prompt tokens found in the prefix cache (not computed again).", T::kCounter, {}, {}};
  d[idx(Metric::kBuildInfo)] = {"tierserve_build_info", "The binary: version, git revision, kernels (value 1).",
                                T::kGauge, {"version", "revision", "isa", "kernels"}, {}};
  return d;
}

}  // namespace

const std::vector<MetricDef>& tierserve_metric_defs() {
  static const std::vector<MetricDef> defs = build();
  return defs;
}

std::unique_ptr<Registry> make_tierserve_registry() {
  auto r = Registry::create(tierserve_metric_defs());
  TS_CHECK(r.is_ok());
  return std::move(r).value();
}

}  // namespace ts::metrics
