// Every metric tierserve exports, declared in one place (Envoy's stats lists): names with
// units, help text, labels, buckets. The serving layer creates its series per tier once
// and updates them from the step loop and the HTTP threads.
#pragma once

#include <cstddef>
#include <vector>

#include "metrics/registry.h"

namespace ts::metrics {

// Index into tierserve_metric_defs() (and so into a Registry made from it).
enum class Metric : size_t {
  kQueueTime,              // tierserve_queue_time_seconds{tier}
  kTimeToFirstToken,       // tierserve_time_to_first_token_seconds{tier}
  kTimePerOutputToken,     // tierserve_time_per_output_token_seconds{tier}
  kRequestDuration,        // tierserve_request_duration_seconds{tier}
  kRequests,               // tierserve_requests_total{tier,outcome}
  kTokens,                 // tierserve_tokens_total{tier,direction}
  kDegradations,           // tierserve_degradations_total{tier_requested,tier_served,reason}
  kQueuedRequests,         // tierserve_queued_requests{tier}
  kRunningRequests,        // tierserve_running_requests{tier}
  kKvBlocksUsed,           // tierserve_kv_blocks_used{tier}
  kStepBudgetShare,        // tierserve_step_budget_share_ratio{tier}
  kPriorityInversions,     // tierserve_priority_inversions_total
  kLatencyCorrelation,     // tierserve_fast_standard_latency_correlation
  kStepsInterrupted,       // tierserve_steps_interrupted_total
  kSpeculativeTokens,      // tierserve_speculative_tokens_total{tier, result}
  kHttpConnectionsOpen,    // tierserve_http_connections_open
  kHttpConnectionsRejected,  // tierserve_http_connections_rejected_total
  kWaitBound,              // tierserve_wait_bound_seconds{tier}
  kStepsForcedExclusive,   // tierserve_steps_forced_exclusive_total
  kStepCost,               // tierserve_step_cost_seconds{part}
  kNumRequestsWaiting,     // tierserve_num_requests_waiting (the gauges gateways route on)
  kNumRequestsRunning,     // tierserve_num_requests_running
  kKvCacheUsage,           // tierserve_kv_cache_usage_ratio
  kCacheConfigInfo,        // tierserve_cache_config_info{block_size,num_blocks}
  kPrefixCacheQueries,     // tierserve_prefix_cache_queries_total (tokens)
  kPrefixCacheHits,        // tierserve_prefix_cache_hits_total (tokens)
  kBuildInfo,              // tierserve_build_info{version,revision,isa,kernels}
  kCount
};

inline size_t idx(Metric m) { return size_t(m); }

// Outcome label values of tierserve_requests_total.
inline constexpr const char* kOutcomes[] = {"ok", "rejected", "downgraded", "promoted", "preempted", "cancelled", "error"};
// Direction label values of tierserve_tokens_total.
inline constexpr const char* kDirections[] = {"in", "out"};

const std::vector<MetricDef>& tierserve_metric_defs();

// A registry with every definition above (creation cannot fail: the list is tested).
std::unique_ptr<Registry> make_tierserve_registry();

}  // namespace ts::metrics
