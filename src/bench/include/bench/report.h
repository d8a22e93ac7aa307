// Aggregation of request records into per-tier and overall metrics, and the report
// writers (terminal summary, JSON, CSV, per-request JSONL, HTML).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/knee.h"
#include "bench/record.h"
#include "bench/slo.h"
#include "bench/stats.h"

namespace ts::bench {

// Metrics of one slice of requests (one tier, or all of them).
struct SliceStats {
  std::string tier;  // "overall", a tier name, or "default" for no requested tier
  size_t n = 0, n_ok = 0, n_errors = 0, n_degraded = 0, n_good = 0;
  std::map<std::string, size_t> errors;  // by type
  std::map<std::string, size_t> error_codes;  // by type:code ("http_429:queue_full")
  std::map<std::string, size_t> served;  // tier served -> count (successful requests)
  Summary ttft_ms, itl_ms, tpot_ms, e2e_ms, queue_ms, send_lag_ms;
  double duration_s = 0;  // the phase's wall time (first schedule to last completion)
  double rps = 0;         // successful requests per second
  double output_tok_s = 0;
  double goodput_rps = 0; // successful requests within the tier's SLO latency limits
  double error_rate = 0, degradation_rate = 0;
  int64_t output_tokens = 0;
  double cost_per_1k_requests = NAN, cost_per_1m_output_tokens = NAN, cost_share = NAN;
};

// Mean latency per time bucket of one tier, for latency-over-time and correlation.
struct TimeSeries {
  std::string tier;
  std::vector<double> t_s;       // bucket start, seconds from the phase start
  std::vector<double> ttft_ms;   // mean TTFT of requests scheduled in the bucket (NaN = none)
  std::vector<double> e2e_ms;
};

struct PhaseStats {
  std::string phase;
  double duration_s = 0;
  SliceStats overall;
  std::vector<SliceStats> tiers;
  std::vector<TimeSeries> series;  // per tier, same buckets
  double bucket_s = 1;
  // Pearson correlation of per-bucket mean TTFT between ultrafast and standard (the
  // sign of a shared bottleneck); NaN when not both present in 5+ buckets.
  double ultrafast_standard_ttft_corr = NAN;
  double ultrafast_standard_e2e_corr = NAN;
};

struct AggregateOptions {
  double bucket_s = 1;
  double price_per_hour = 0;  // 0 = no cost columns
  const SloSpec* slo = nullptr;  // for goodput
};

// Aggregates the records of one phase. Duration runs from the earliest scheduled time
// to the latest end (or `duration_s_override` when > 0).
PhaseStats aggregate(const std::vector<RequestRecord>& recs, const std::string& phase,
                     const AggregateOptions& opt, double duration_s_override = 0);

// A MetricSource over aggregated stats, for SLO evaluation.
class PhaseMetricSource : public MetricSource {
 public:
  explicit PhaseMetricSource(const PhaseStats& p) : p_(p) {}
  bool has_tier(const std::string& tier) const override;
  double value(const std::string& tier, const std::string& metric,
               const std::string& stat) const override;

 private:
  const SliceStats* find(const std::string& tier) const;
  const PhaseStats& p_;
};

// One step of a sweep.
struct SweepStep {
  double offered = 0;  // rate (req/s) or concurrency
  PhaseStats stats;
  bool slo_pass = true;
};

struct CompareStats {
  std::string label_a, label_b;
  PhaseStats a, b;
};

// Everything a run produced.
struct Report {
  std::string command_line;
  std::string target_url;
  std::string workload;
  std::string mode;        // "open:poisson@5rps", "closed:c=8", "sweep", "compare"
  uint64_t seed = 0;
  double price_per_hour = 0;
  bool has_cold = false;
  RequestRecord cold;      // the first request after (our observation of) server start
  size_t n_warmup = 0, n_warmup_errors = 0;
  PhaseStats steady;
  std::vector<SweepStep> sweep;
  std::string sweep_metric = "ttft";  // the P99 the curve plots
  std::string sweep_unit = "rps";     // "rps" or "concurrency"
  int knee_index = -1;
  double max_rate_meeting_slo = NAN;  // sweep: the highest offered load that passed
  bool has_compare = false;
  CompareStats compare;
  std::vector<TierVerdict> verdicts;
  bool slo_given = false;
  std::vector<RequestRecord> records;  // all measured records (for JSONL and charts)
};

std::vector<CurvePoint> sweep_curve(const Report& r);

std::string format_summary(const Report& r);  // the terminal summary
std::string to_json(const Report& r);         // machine-readable results
std::string to_csv(const Report& r);          // one row per (phase, tier)
std::string to_jsonl(const std::vector<RequestRecord>& recs);  // one line per request
std::string to_html(const Report& r);         // self-contained report with charts

}  // namespace ts::bench
