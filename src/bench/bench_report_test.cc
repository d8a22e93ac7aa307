// Aggregation and report writers on hand-made request records (no network, no clock):
// per-tier counts, rates, goodput under an SLO, cost shares, latency over time and the
// ultrafast/standard correlation, and the JSON/CSV/JSONL/summary forms.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "bench/report.h"
#include "bench/slo.h"

namespace ts::bench {
namespace {

constexpr int64_t kMs = 1'000'000;

// A streamed request scheduled at t_ms: TTFT ttft_ms, then n tokens tpot_ms apart.
RequestRecord rec(const std::string& tier, double t_ms, double ttft_ms, int n, double tpot_ms) {
  RequestRecord r;
  r.tier_requested = tier;
  r.tier_served = tier;
  r.phase = "steady";
  r.scheduled_ns = int64_t(t_ms * kMs);
  r.sent_ns = r.scheduled_ns + kMs;  // 1 ms send lag
  r.first_token_ns = r.scheduled_ns + int64_t(ttft_ms * kMs);
  for (int i = 0; i < n; ++i) r.token_ns.push_back(r.first_token_ns + int64_t(i * tpot_ms * kMs));
  r.end_ns = r.token_ns.back() + kMs;
  r.n_output_tokens = n;
  r.http_status = 200;
  return r;
}

TEST(Aggregate, CountsRatesGoodputAndCost) {
  std::vector<RequestRecord> v;
  // 10 s of load: ultrafast every second (TTFT 50 ms), standard twice a second (TTFT
  // 100 ms, one in four at 400 ms), 5 tokens 10 ms apart each.
  for (int s = 0; s < 10; ++s) {
    v.push_back(rec("ultrafast", s * 1000.0, 50, 5, 10));
    v.push_back(rec("standard", s * 1000.0, s % 2 ? 400 : 100, 5, 10));
    v.push_back(rec("standard", s * 1000.0 + 500, 100, 5, 10));
  }
  v[4].tier_served = "batch";  // one degraded standard request
  RequestRecord err = rec("standard", 9990, 10, 1, 1);
  err.error = "http_429";
  err.http_status = 429;
  v.push_back(err);
  auto slo = parse_slo_text("standard: {ttft_p99: 200ms}\n");
  ASSERT_TRUE(slo.is_ok());
  AggregateOptions opt;
  opt.price_per_hour = 3.6;
  opt.slo = &*slo;
  const PhaseStats p = aggregate(v, "steady", opt, 10.0);
  ASSERT_EQ(p.tiers.size(), 2u);
  EXPECT_EQ(p.tiers[0].tier, "ultrafast");  // tiers in priority order
  const SliceStats &uf = p.tiers[0], &st = p.tiers[1];
  EXPECT_EQ(uf.n, 10u);
  EXPECT_EQ(st.n, 21u);
  EXPECT_EQ(st.n_ok, 20u);
  EXPECT_EQ(st.errors.at("http_429"), 1u);
  EXPECT_NEAR(st.error_rate, 1.0 / 21, 1e-12);
  EXPECT_EQ(st.n_degraded, 1u);
  EXPECT_DOUBLE_EQ(st.degradation_rate, 1.0 / 20);
  EXPECT_DOUBLE_EQ(uf.rps, 1.0);
  EXPECT_DOUBLE_EQ(st.rps, 2.0);
  EXPECT_DOUBLE_EQ(p.overall.rps, 3.0);
  EXPECT_DOUBLE_EQ(p.overall.output_tok_s, 15.0);
  // Goodput: standard requests with TTFT over 200 ms (5 of them) are not good.
  EXPECT_EQ(st.n_good, 15u);
  EXPECT_DOUBLE_EQ(st.goodput_rps, 1.5);
  EXPECT_EQ(uf.n_good, 10u);  // no SLO for ultrafast: every success is good
  EXPECT_DOUBLE_EQ(uf.ttft_ms.p50, 50);
  EXPECT_DOUBLE_EQ(uf.tpot_ms.p50, 10);
  EXPECT_DOUBLE_EQ(uf.itl_ms.max, 10);
  EXPECT_EQ(uf.itl_ms.n, 40u);
  EXPECT_DOUBLE_EQ(uf.e2e_ms.p50, 50 + 40 + 1);
  EXPECT_DOUBLE_EQ(p.overall.send_lag_ms.max, 1);
  // $3.60/h at 3 req/s: 0.001 / 3 * 1000 per 1k requests.
  EXPECT_NEAR(p.overall.cost_per_1k_requests, 1.0 / 3, 1e-12);
  EXPECT_NEAR(uf.cost_share, 1.0 / 3, 1e-12);  // 50 of 150 tokens
  EXPECT_NEAR(uf.cost_per_1k_requests, p.overall.cost_per_1k_requests, 1e-12);  // same tokens per request
  // Metric source for SLOs.
  PhaseMetricSource src(p);
  EXPECT_DOUBLE_EQ(src.value("standard", "throughput_rps", ""), 2.0);
  EXPECT_DOUBLE_EQ(src.value("ultrafast", "ttft", "p99"), 50);
  EXPECT_TRUE(std::isnan(src.value("batch", "ttft", "p99")));
  EXPECT_FALSE(src.has_tier("batch"));
  EXPECT_FALSE(all_pass(evaluate_slo(*slo, src)));  // standard TTFT P99 is 400 ms
}

TEST(Aggregate, LatencyOverTimeAndCorrelation) {
  std::vector<RequestRecord> v;
  // Both tiers slow down together in seconds 3 and 4 (a shared bottleneck).
  for (int s = 0; s < 8; ++s) {
    const double slow = (s == 3 || s == 4) ? 300 : 0;
    v.push_back(rec("ultrafast", s * 1000.0 + 100, 20 + slow + s, 2, 5));
    v.push_back(rec("standard", s * 1000.0 + 200, 80 + slow * 2, 2, 5));
  }
  AggregateOptions opt;
  const PhaseStats p = aggregate(v, "steady", opt);
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].t_s.size(), 8u);
  EXPECT_DOUBLE_EQ(p.series[0].ttft_ms[3], 323);
  EXPECT_GT(p.ultrafast_standard_ttft_corr, 0.99);
  // Independent latencies: no correlation to speak of.
  std::vector<RequestRecord> w;
  const double uf[] = {20, 25, 20, 25, 20, 25, 20, 25}, st[] = {80, 80, 90, 90, 80, 80, 90, 90};
  for (int s = 0; s < 8; ++s) {
    w.push_back(rec("ultrafast", s * 1000.0, uf[s], 2, 5));
    w.push_back(rec("standard", s * 1000.0, st[s], 2, 5));
  }
  EXPECT_NEAR(aggregate(w, "steady", opt).ultrafast_standard_ttft_corr, 0.0, 1e-9);
  // Too few buckets: undefined.
  w.resize(6);
  EXPECT_TRUE(std::isnan(aggregate(w, "steady", opt).ultrafast_standard_ttft_corr));
}

TEST(Writers, JsonCsvJsonlAndSummary) {
  Report r;
  r.target_url = "http://x:1";
  r.mode = "test";
  std::vector<RequestRecord> v = {rec("ultrafast", 0, 10, 3, 5), rec("standard", 100, 30, 3, 5)};
  AggregateOptions opt;
  opt.price_per_hour = 1;
  r.price_per_hour = 1;
  r.steady = aggregate(v, "steady", opt);
  r.records = v;
  r.slo_given = true;
  PhaseMetricSource src(r.steady);
  r.verdicts = evaluate_slo(*parse_slo_text("ultrafast: {ttft_p99: 5}\n"), src);
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j["steady"]["tiers"].size(), 2u);
  EXPECT_EQ(j["steady"]["tiers"][0]["ttft_ms"]["p50"], 10);
  EXPECT_FALSE(j["slo"]["pass"].get<bool>());
  EXPECT_EQ(j["slo"]["tiers"][0]["checks"][0]["measured"], 10);
  const std::string csv = to_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);  // header + 2 tiers + overall
  const std::string header = csv.substr(0, csv.find('\n'));
  const std::string row = csv.substr(csv.find('\n') + 1, csv.find('\n', csv.find('\n') + 1) - csv.find('\n') - 1);
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), std::count(row.begin(), row.end(), ','));
  const std::string jl = to_jsonl(v);
  EXPECT_EQ(std::count(jl.begin(), jl.end(), '\n'), 2);
  EXPECT_EQ(nlohmann::json::parse(jl.substr(0, jl.find('\n')))["token_ms"].size(), 3u);
  const std::string s = format_summary(r);
  EXPECT_NE(s.find("FAIL ultrafast"), std::string::npos);
  EXPECT_NE(s.find("ttft_p99 = 10.000 <= 5"), std::string::npos) << s;
  EXPECT_NE(s.find("per 1k requests"), std::string::npos);
}

}  // namespace
}  // namespace ts::bench
