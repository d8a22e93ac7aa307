// Percentiles from histograms and the rolling latency correlation, on synthetic data.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "metrics/correlation.h"
#include "metrics/quantile.h"

namespace ts::metrics {
namespace {

TEST(Quantile, InterpolatesInsideTheBucket) {
  const std::vector<double> b = {1, 2, 4};
  // 10 in (0,1], 10 in (1,2], 0 in (2,4], 0 above.
  const std::vector<uint64_t> cum = {10, 20, 20, 20};
  EXPECT_DOUBLE_EQ(histogram_quantile(0.25, b, cum), 0.5);
  EXPECT_DOUBLE_EQ(histogram_quantile(0.5, b, cum), 1.0);
  EXPECT_DOUBLE_EQ(histogram_quantile(0.75, b, cum), 1.5);
  EXPECT_DOUBLE_EQ(histogram_quantile(1.0, b, cum), 2.0);
  EXPECT_TRUE(std::isnan(histogram_quantile(0.5, b, std::vector<uint64_t>{0, 0, 0, 0})));
  // Everything above the last bound: the last finite bound.
  EXPECT_DOUBLE_EQ(histogram_quantile(0.99, b, std::vector<uint64_t>{0, 0, 0, 5}), 4.0);
}

TEST(Quantile, UniformSampleWithinBucketWidth) {
  auto r = Registry::create({{"l_seconds", "", MetricType::kHistogram, {"tier"},
                              {0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1}}});
  ASSERT_TRUE(r.is_ok());
  Histogram* h = (*r)->histogram(0, {"t"});
  Rng rng(3);
  for (int i = 0; i < 100000; ++i) h->observe(0.1 * rng.uniform());
  const FamilySnapshot f = (*r)->snapshot()[0];
  const Percentiles p = percentiles(f.def, f.series[0]);
  EXPECT_NEAR(p.p50, 0.050, 0.002);
  EXPECT_NEAR(p.p95, 0.095, 0.002);
  EXPECT_NEAR(p.p99, 0.099, 0.002);
  EXPECT_EQ(p.count, 100000u);

  // A window: only what came after the first snapshot (all slow).
  for (int i = 0; i < 1000; ++i) h->observe(0.085);
  const FamilySnapshot g = (*r)->snapshot()[0];
  const SeriesSnapshot d = histogram_delta(g.series[0], f.series[0]);
  EXPECT_EQ(d.count, 1000u);
  const Percentiles w = percentiles(g.def, d);
  EXPECT_GE(w.p50, 0.08);
  EXPECT_LE(w.p99, 0.09);
}

TEST(Correlation, SyntheticData) {
  RollingCorrelation c(50);
  EXPECT_FALSE(c.value().has_value());
  Rng rng(9);
  // y = 2x + small noise: near 1.
  for (int i = 0; i < 50; ++i) {
    const double x = rng.uniform();
    c.add(x, 2 * x + 0.01 * rng.normal());
  }
  EXPECT_GT(*c.value(), 0.99);
  // The window rolls: 50 pairs of y = -x replace them entirely.
  for (int i = 0; i < 50; ++i) {
    const double x = rng.uniform();
    c.add(x, -x);
  }
  EXPECT_NEAR(*c.value(), -1.0, 1e-9);
  // Independent streams: near 0.
  RollingCorrelation z(2000);
  for (int i = 0; i < 2000; ++i) z.add(rng.uniform(), rng.uniform());
  EXPECT_NEAR(*z.value(), 0.0, 0.08);
  // A constant side has no correlation.
  RollingCorrelation k(10);
  for (int i = 0; i < 10; ++i) k.add(double(i), 1.0);
  EXPECT_FALSE(k.value().has_value());
}

TEST(Correlation, SharedBottleneckShowsUp) {
  // Both tiers slow down together when a shared load factor rises: per-interval means
  // correlate strongly; intervals with no fast request are skipped.
  LatencyCorrelator lc(30);
  Rng rng(11);
  std::optional<double> v;
  for (int interval = 0; interval < 40; ++interval) {
    const double load = 1.0 + std::sin(interval * 0.3);
    for (int i = 0; i < 20; ++i) lc.record_standard(0.5 * load + 0.02 * rng.uniform());
    if (interval % 7 != 3)
      for (int i = 0; i < 5; ++i) lc.record_fast(0.05 * load + 0.002 * rng.uniform());
    v = lc.close_interval();
  }
  ASSERT_TRUE(v.has_value());
  EXPECT_GT(*v, 0.95);
}

}  // namespace
}  // namespace ts::metrics
