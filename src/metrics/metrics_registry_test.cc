// Registry: validation of definitions, series per label values, concurrent updates, and
// the tierserve list itself (names with units, the labels the issue asks for).
#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "metrics/prometheus.h"
#include "metrics/tierserve_metrics.h"

namespace ts::metrics {
namespace {

TEST(Registry, RejectsBadDefinitions) {
  EXPECT_FALSE(Registry::create({{"bad name", "", MetricType::kCounter, {}, {}}}).is_ok());
  EXPECT_FALSE(Registry::create({{"x_total", "", MetricType::kCounter, {}, {}},
                                 {"x_total", "", MetricType::kCounter, {}, {}}})
                   .is_ok());
  EXPECT_FALSE(Registry::create({{"h_seconds", "", MetricType::kHistogram, {}, {1, 0.5}}}).is_ok());
  EXPECT_FALSE(Registry::create({{"h_seconds", "", MetricType::kHistogram, {}, {}}}).is_ok());
  EXPECT_FALSE(Registry::create({{"h_seconds", "", MetricType::kHistogram, {"le"}, {1}}}).is_ok());
  EXPECT_FALSE(Registry::create({{"g", "", MetricType::kGauge, {"tier", "tier"}, {}}}).is_ok());
  EXPECT_FALSE(Registry::create({{"g", "", MetricType::kGauge, {"__x"}, {}}}).is_ok());
  EXPECT_TRUE(Registry::create({{"ns:g", "", MetricType::kGauge, {"tier"}, {}}}).is_ok());
}

TEST(Registry, SeriesAreStableAndPerLabelValues) {
  auto r = Registry::create({{"c_total", "", MetricType::kCounter, {"tier"}, {}}});
  ASSERT_TRUE(r.is_ok());
  Counter* a = (*r)->counter(0, {"a"});
  EXPECT_EQ((*r)->counter(0, {"a"}), a);
  EXPECT_NE((*r)->counter(0, {"b"}), a);
  a->inc(5);
  EXPECT_EQ(a->value(), 5u);
  EXPECT_EQ((*r)->find("c_total"), 0);
  EXPECT_EQ((*r)->find("nope"), -1);
}

TEST(Registry, ConcurrentUpdatesAreNotLost) {
  auto r = Registry::create({{"c_total", "", MetricType::kCounter, {"tier"}, {}},
                             {"g", "", MetricType::kGauge, {}, {}},
                             {"h_seconds", "", MetricType::kHistogram, {"tier"}, {0.5, 1}}});
  ASSERT_TRUE(r.is_ok());
  Registry& reg = **r;
  constexpr int kThreads = 4, kN = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      Counter* c = reg.counter(0, {"x"});
      Histogram* h = reg.histogram(2, {"x"});
      for (int i = 0; i < kN; ++i) {
        c->inc();
        reg.gauge(1)->add(1.0);
        h->observe(i % 2 ? 0.25 : 2.0);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(reg.counter(0, {"x"})->value(), uint64_t(kThreads) * kN);
  EXPECT_DOUBLE_EQ(reg.gauge(1)->value(), double(kThreads) * kN);
  const Snapshot s = reg.snapshot();
  ASSERT_EQ(s[2].series.size(), 1u);
  EXPECT_EQ(s[2].series[0].count, uint64_t(kThreads) * kN);
  EXPECT_EQ(s[2].series[0].cumulative[0], uint64_t(kThreads) * kN / 2);
  EXPECT_DOUBLE_EQ(s[2].series[0].sum, kThreads * (kN / 2) * (0.25 + 2.0));
}

TEST(TierserveMetrics, DeclaredInOnePlaceWithUnits) {
  const auto& defs = tierserve_metric_defs();
  ASSERT_EQ(defs.size(), idx(Metric::kCount));
  auto reg = make_tierserve_registry();
  EXPECT_EQ(defs[idx(Metric::kQueueTime)].name, "tierserve_queue_time_seconds");
  EXPECT_EQ(defs[idx(Metric::kTimeToFirstToken)].name, "tierserve_time_to_first_token_seconds");
  EXPECT_EQ(defs[idx(Metric::kTimePerOutputToken)].name, "tierserve_time_per_output_token_seconds");
  EXPECT_EQ(defs[idx(Metric::kRequestDuration)].name, "tierserve_request_duration_seconds");
  EXPECT_EQ(defs[idx(Metric::kRequests)].labels, (std::vector<std::string>{"tier", "outcome"}));
  EXPECT_EQ(defs[idx(Metric::kTokens)].labels, (std::vector<std::string>{"tier", "direction"}));
  for (const MetricDef& d : defs) {
    EXPECT_EQ(d.name.rfind("tierserve_", 0), 0u) << d.name;
    EXPECT_FALSE(d.help.empty()) << d.name;
    const bool is_counter = d.type == MetricType::kCounter;
    const bool ends_total = d.name.size() > 6 && d.name.compare(d.name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(is_counter, ends_total) << d.name;
    if (d.type == MetricType::kHistogram) {
      EXPECT_EQ(d.name.compare(d.name.size() - 8, 8, "_seconds"), 0) << d.name;
    }
  }
  for (const char* o : kOutcomes) reg->counter(idx(Metric::kRequests), {"ultrafast", o})->inc();
  reg->histogram(idx(Metric::kTimeToFirstToken), {"ultrafast"})->observe(0.02);
  const std::string text = format_prometheus(reg->snapshot());
  EXPECT_NE(text.find("tierserve_requests_total{tier=\"ultrafast\",outcome=\"preempted\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tierserve_time_to_first_token_seconds_bucket{tier=\"ultrafast\",le=\"+Inf\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("tierserve_priority_inversions_total 0\n"), std::string::npos);
}

}  // namespace
}  // namespace ts::metrics
