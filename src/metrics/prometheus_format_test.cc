// Golden text of the Prometheus formatter: HELP/TYPE lines, label escaping, counters,
// gauges, histograms with cumulative _bucket lines ending in le="+Inf", _sum and _count.
#include "metrics/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ts::metrics {
namespace {

TEST(Prometheus, GoldenText) {
  auto r = Registry::create({
      {"demo_requests_total", "Requests by tier.\nSecond line with a \\ backslash.", MetricType::kCounter,
       {"tier", "outcome"}, {}},
      {"demo_queue_depth", "Waiting requests.", MetricType::kGauge, {"tier"}, {}},
      {"demo_latency_seconds", "Latency.", MetricType::kHistogram, {"tier"}, {0.1, 0.5, 2.5}},
      {"demo_inversions_total", "Unlabeled counter.", MetricType::kCounter, {}, {}},
      {"demo_empty", "Labeled gauge without series.", MetricType::kGauge, {"tier"}, {}},
  });
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Registry& reg = **r;
  reg.counter(0, {"standard", "ok"})->inc(3);
  reg.counter(0, {"a\"b\\c\nd", "error"})->inc();
  reg.gauge(1, {"batch"})->set(0.25);
  reg.gauge(1, {"ultrafast"})->set(-2);
  Histogram* h = reg.histogram(2, {"standard"});
  for (double v : {0.05, 0.1, 0.3, 1.0, 7.0}) h->observe(v);
  reg.counter(3)->inc(2);

  const std::string expected =
      "# HELP demo_requests_total Requests by tier.\\nSecond line with a \\\\ backslash.\n"
      "# TYPE demo_requests_total counter\n"
      "demo_requests_total{tier=\"a\\\"b\\\\c\\nd\",outcome=\"error\"} 1\n"
      "demo_requests_total{tier=\"standard\",outcome=\"ok\"} 3\n"
      "# HELP demo_queue_depth Waiting requests.\n"
      "# TYPE demo_queue_depth gauge\n"
      "demo_queue_depth{tier=\"batch\"} 0.25\n"
      "demo_queue_depth{tier=\"ultrafast\"} -2\n"
      "# HELP demo_latency_seconds Latency.\n"
      "# TYPE demo_latency_seconds histogram\n"
      "demo_latency_seconds_bucket{tier=\"standard\",le=\"0.1\"} 2\n"
      "demo_latency_seconds_bucket{tier=\"standard\",le=\"0.5\"} 3\n"
      "demo_latency_seconds_bucket{tier=\"standard\",le=\"2.5\"} 4\n"
      "demo_latency_seconds_bucket{tier=\"standard\",le=\"+Inf\"} 5\n"
      "demo_latency_seconds_sum{tier=\"standard\"} 8.45\n"
      "demo_latency_seconds_count{tier=\"standard\"} 5\n"
      "# HELP demo_inversions_total Unlabeled counter.\n"
      "# TYPE demo_inversions_total counter\n"
      "demo_inversions_total 2\n"
      "# HELP demo_empty Labeled gauge without series.\n"
      "# TYPE demo_empty gauge\n";
  EXPECT_EQ(format_prometheus(reg.snapshot()), expected);
}

TEST(Prometheus, Values) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(1), "1");
  EXPECT_EQ(format_value(0.005), "0.005");
  EXPECT_EQ(format_value(1e-9), "1e-09");
  EXPECT_EQ(format_value(12345678901234.0), "12345678901234");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("q\"b\\n\n"), "q\\\"b\\\\n\\n");
  EXPECT_EQ(escape_help("a \"quoted\" help"), "a \"quoted\" help");  // quotes stay in HELP
}

}  // namespace
}  // namespace ts::metrics
