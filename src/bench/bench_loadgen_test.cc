// The load tester end to end against a deliberately slow server with known delays: the
// reported percentiles, rates, error types, degradation, coordinated-omission handling,
// closed loop, sweep + knee + SLO, and comparison mode.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/bench.h"
#include "testing/slow_server.h"

namespace ts::bench {
namespace {

using testing::SlowServer;

Options base_options(const SlowServer& s) {
  Options o;
  o.url = s.url();
  o.progress = false;
  o.cold_start = false;
  o.mode = "open";
  o.arrival = {ArrivalKind::kConstant, 20, 1, 0};
  o.request_timeout_s = 30;
  return o;
}

Workload synthetic(int max_tokens, const std::string& mix = "") {
  SyntheticSpec spec;
  spec.input = *parse_length_dist("8");
  spec.output = *parse_length_dist(std::to_string(max_tokens));
  spec.mix = *parse_tier_mix(mix);
  return Workload::synthetic(spec, 1);
}

const SliceStats* tier(const PhaseStats& p, const std::string& name) {
  for (const auto& t : p.tiers)
    if (t.tier == name) return &t;
  return nullptr;
}

TEST(Loadgen, PercentilesAndRatesMatchInjectedDelays) {
  SlowServer srv({.ttft_ms = 50, .tier_ttft_ms = {{"ultrafast", 20}, {"standard", 80}}, .per_token_ms = 10});
  Options o = base_options(srv);
  o.n_requests = 40;
  o.cold_start = true;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(5, "ultrafast=1,standard=1"), clock);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const PhaseStats& p = r->steady;
  EXPECT_TRUE(r->has_cold);
  EXPECT_TRUE(r->cold.ok());
  EXPECT_EQ(p.overall.n, 40u);
  EXPECT_EQ(p.overall.n_ok, 40u);
  const SliceStats* uf = tier(p, "ultrafast");
  const SliceStats* st = tier(p, "standard");
  ASSERT_TRUE(uf && st);
  EXPECT_EQ(uf->n + st->n, 40u);
  // Injected: TTFT 20 / 80 ms, then 4 more tokens 10 ms apart. Never less than injected;
  // the upper bounds leave room for a loaded 2-core machine (the client and the server
  // share it), not for a wrong measurement (which would be off by a whole delay).
  EXPECT_GE(uf->ttft_ms.min, 19.5);
  EXPECT_GE(st->ttft_ms.min, 79.5);
  EXPECT_LT(uf->ttft_ms.p50, 20 + 30);
  EXPECT_GE(st->ttft_ms.p50, 79.5);
  EXPECT_LT(st->ttft_ms.p50, 80 + 30);
  EXPECT_GE(p.overall.itl_ms.p50, 9.5);
  EXPECT_LT(p.overall.itl_ms.p50, 10 + 8);
  EXPECT_GE(p.overall.tpot_ms.p50, 9.5);
  EXPECT_LT(p.overall.tpot_ms.p50, 10 + 8);
  EXPECT_GE(st->e2e_ms.p50, 119.5);
  EXPECT_LT(st->e2e_ms.p50, 120 + 40);
  EXPECT_EQ(p.overall.output_tokens, 200);
  // 40 requests scheduled 50 ms apart: ~1.95 s of schedule plus the last response.
  EXPECT_NEAR(p.overall.rps, 40 / (1.95 + 0.12), 2.5);
  EXPECT_LT(p.overall.send_lag_ms.p99, 20);
  EXPECT_EQ(p.overall.error_rate, 0);
  // The server's queue time is read from the tierserve extension object.
  EXPECT_EQ(p.overall.queue_ms.n, 40u);
  EXPECT_LT(p.overall.queue_ms.p99, 5);
  // Keep-alive: far fewer connections than requests at this rate.
  EXPECT_LT(srv.connections(), 20);
}

TEST(Loadgen, StallIsChargedToRequestsScheduledDuringItEvenWhenSentLate) {
  // Server: 5 ms per request, and the 10th request stalls every first token for 400 ms.
  // Client: at most one request in flight, 50 req/s. The ~20 requests due during the
  // stall wait in the client; measured from their schedule they must show the stall.
  SlowServer srv({.ttft_ms = 5, .per_token_ms = 1, .stall_at = 10, .stall_ms = 400});
  Options o = base_options(srv);
  o.arrival.rate_rps = 50;
  o.n_requests = 60;
  o.max_inflight = 1;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(1), clock);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const SliceStats& s = r->steady.overall;
  ASSERT_EQ(s.n_ok, 60u);
  EXPECT_GE(s.ttft_ms.max, 390);
  int slow_from_schedule = 0, slow_from_send = 0;
  for (const auto& rec : r->records) {
    if (rec.phase != "steady") continue;
    if (rec.ttft_ms() > 100) ++slow_from_schedule;
    if (double(rec.first_token_ns - rec.sent_ns) / 1e6 > 100) ++slow_from_send;
  }
  // 400 ms at 20 ms spacing: ~20 requests were due while the server stalled.
  EXPECT_GE(slow_from_schedule, 15);
  EXPECT_LE(slow_from_schedule, 30);
  // Timed from the send, only the stalled request itself looks slow: the omission the
  // scheduled-time measurement corrects.
  EXPECT_LE(slow_from_send, 2);
  EXPECT_GT(s.send_lag_ms.max, 300);
  EXPECT_GE(s.ttft_ms.p99, 300);
}

TEST(Loadgen, RateLimitedRequestsAreCountedByType) {
  SlowServer srv({.ttft_ms = 5, .per_token_ms = 1, .every_nth_429 = 4});
  Options o = base_options(srv);
  o.arrival.rate_rps = 40;
  o.n_requests = 40;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(2), clock);
  ASSERT_TRUE(r.is_ok());
  const SliceStats& s = r->steady.overall;
  EXPECT_EQ(s.n, 40u);
  EXPECT_EQ(s.n_errors, 10u);
  ASSERT_EQ(s.errors.count("http_429"), 1u);
  EXPECT_EQ(s.errors.at("http_429"), 10u);
  EXPECT_DOUBLE_EQ(s.error_rate, 0.25);
  int with_retry_after = 0;
  for (const auto& rec : r->records) with_retry_after += rec.retry_after_s == 1;
  EXPECT_EQ(with_retry_after, 10);
  EXPECT_EQ(s.ttft_ms.n, 30u);  // latency only of successes
}

TEST(Loadgen, DegradationRateFromServedTier) {
  SlowServer srv({.ttft_ms = 5, .per_token_ms = 1, .degrade_every_nth_ultrafast = 2});
  Options o = base_options(srv);
  o.arrival.rate_rps = 40;
  o.n_requests = 40;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(2, "ultrafast=1"), clock);
  ASSERT_TRUE(r.is_ok());
  const SliceStats* uf = tier(r->steady, "ultrafast");
  ASSERT_TRUE(uf);
  EXPECT_EQ(uf->n_degraded, 20u);
  EXPECT_DOUBLE_EQ(uf->degradation_rate, 0.5);
  EXPECT_EQ(uf->served.at("standard"), 20u);
  for (const auto& rec : r->records) {
    if (rec.degraded()) {
      EXPECT_EQ(rec.degraded_reason, "queue_timeout");
    }
  }
}

TEST(Loadgen, ClosedLoopHoldsConcurrency) {
  SlowServer srv({.ttft_ms = 20, .per_token_ms = 5});
  Options o = base_options(srv);
  o.mode = "closed";
  o.concurrency = 4;
  o.n_requests = 40;
  o.stream = false;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(3), clock);
  ASSERT_TRUE(r.is_ok());
  const SliceStats& s = r->steady.overall;
  EXPECT_EQ(s.n_ok, 40u);
  EXPECT_EQ(srv.max_concurrent(), 4);
  // Non-stream: TTFT is the whole response, 20 + 2*5 ms.
  EXPECT_NEAR(s.e2e_ms.p50, 30, 10);
  EXPECT_DOUBLE_EQ(s.ttft_ms.p50, s.e2e_ms.p50);
  EXPECT_NEAR(s.rps, 4 / 0.031, 40);
  EXPECT_LT(s.send_lag_ms.max, 1);
}

TEST(Loadgen, SweepFindsTheKneeAndTheHighestRateMeetingTheSlo) {
  // One slot, 20 ms per request: capacity 50 req/s. Above it, queueing explodes.
  SlowServer srv({.ttft_ms = 20, .per_token_ms = 1, .serial = true});
  Options o = base_options(srv);
  o.sweep = {10, 20, 40, 80};
  o.sweep_step_requests = 30;
  o.slo = *parse_slo_text("overall: {ttft_p99: 100ms}\n");
  o.slo_given = true;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(1), clock);
  ASSERT_TRUE(r.is_ok());
  ASSERT_EQ(r->sweep.size(), 4u);
  EXPECT_TRUE(r->sweep[0].slo_pass);
  EXPECT_TRUE(r->sweep[1].slo_pass);
  EXPECT_FALSE(r->sweep[3].slo_pass);  // 80 req/s into a 50 req/s server
  EXPECT_GT(r->sweep[3].stats.overall.ttft_ms.p99, 200);
  EXPECT_GE(r->max_rate_meeting_slo, 20);
  EXPECT_LE(r->max_rate_meeting_slo, 40);
  EXPECT_GE(r->knee_index, 1);
  EXPECT_LE(r->knee_index, 2);
  EXPECT_TRUE(all_pass(r->verdicts));  // at the highest passing step
}

TEST(Loadgen, CompareModeRatios) {
  SlowServer a({.ttft_ms = 20, .per_token_ms = 2}), b({.ttft_ms = 60, .per_token_ms = 2});
  Options o = base_options(a);
  o.url_b = b.url();
  o.label_a = "fast";
  o.label_b = "slow";
  o.n_requests = 20;
  o.compare_rounds = 2;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(2), clock);
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE(r->has_compare);
  EXPECT_EQ(r->compare.a.overall.n, 20u);
  EXPECT_EQ(r->compare.b.overall.n, 20u);
  EXPECT_EQ(a.requests(), 20);
  EXPECT_EQ(b.requests(), 20);
  EXPECT_NEAR(r->compare.b.overall.ttft_ms.p50 / r->compare.a.overall.ttft_ms.p50, 3.0, 0.6);
  const std::string summary = format_summary(*r);
  EXPECT_NE(summary.find("ratios slow/fast"), std::string::npos);
}

TEST(Loadgen, PerTierArrivalRatesAndCorrelationOverTime) {
  // Ultrafast at 10 req/s and standard at 30 req/s, each its own process; the stall in
  // the middle hits both tiers in the same bucket, so their latencies move together.
  SlowServer srv({.ttft_ms = 5, .per_token_ms = 1, .stall_at = 40, .stall_ms = 500});
  Options o = base_options(srv);
  o.arrival = {ArrivalKind::kConstant, 40, 1, 0};
  o.tier_rates = {{"ultrafast", 10}, {"standard", 30}};
  o.n_requests = 120;
  o.bucket_s = 0.25;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(1), clock);
  ASSERT_TRUE(r.is_ok());
  const SliceStats* uf = tier(r->steady, "ultrafast");
  const SliceStats* st = tier(r->steady, "standard");
  ASSERT_TRUE(uf && st);
  EXPECT_EQ(uf->n, 30u);
  EXPECT_EQ(st->n, 90u);
  EXPECT_NEAR(uf->rps / st->rps, 1.0 / 3, 0.01);
  ASSERT_FALSE(std::isnan(r->steady.ultrafast_standard_ttft_corr));
  EXPECT_GT(r->steady.ultrafast_standard_ttft_corr, 0.5);
}

TEST(Loadgen, WarmupAndRampAreExcludedFromTheSteadyState) {
  SlowServer srv({.ttft_ms = 5, .per_token_ms = 1});
  Options o = base_options(srv);
  o.cold_start = true;
  o.warmup_requests = 5;
  o.arrival = {ArrivalKind::kConstant, 20, 1, /*ramp_s=*/1.0};
  o.n_requests = 20;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(1), clock);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->n_warmup, 5u);
  EXPECT_EQ(r->steady.overall.n, 20u);
  size_t ramp = 0, steady = 0, cold = 0;
  for (const auto& rec : r->records) {
    ramp += rec.phase == "ramp";
    steady += rec.phase == "steady";
    cold += rec.phase == "cold";
  }
  EXPECT_EQ(cold, 1u);
  EXPECT_EQ(steady, 20u);
  EXPECT_EQ(ramp, 10u);  // 1 s rising linearly to 20 req/s: 10 arrivals
  // Warm-up requests are sent but never recorded.
  EXPECT_EQ(srv.requests(), int(1 + 5 + ramp + steady));
}

TEST(Loadgen, StaleKeepAliveConnectionsAreRetriedOnFreshOnes) {
  // The server drops every connection after its response without saying so (as an idle
  // timeout would): every pooled connection is stale when reused, and the one retry must
  // not land on another stale one.
  SlowServer srv({.ttft_ms = 20, .per_token_ms = 1, .close_after_response = true});
  Options o = base_options(srv);
  // Bursts open many connections at once; the gaps between them leave several stale
  // ones in the pool for the next burst.
  o.arrival = {ArrivalKind::kGamma, 50, 5, 0};
  o.n_requests = 60;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(2), clock);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->steady.overall.n_ok, 60u) << format_summary(*r);
}

TEST(Loadgen, ConnectionRefusedIsAConfigurationError) {
  uint16_t port;
  {
    SlowServer s({});
    port = s.port();
  }
  Options o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.progress = false;
  o.n_requests = 1;
  SteadyClock clock;
  auto r = run_bench(o, synthetic(1), clock);
  EXPECT_FALSE(r.is_ok());
  o.url = "https://example.com";
  EXPECT_FALSE(run_bench(o, synthetic(1), clock).is_ok());
}

}  // namespace
}  // namespace ts::bench
