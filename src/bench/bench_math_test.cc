// The load tester's math against hand-computed data: percentiles, correlation, the knee,
// cost arithmetic and the seeded arrival schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "bench/arrival.h"
#include "bench/cost.h"
#include "bench/knee.h"
#include "bench/stats.h"

namespace ts::bench {
namespace {

TEST(Percentile, MatchesNumpyLinearOnOneToHundred) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);
  // numpy.percentile(range(1, 101), q): 50.5, 90.1, 95.05, 99.01, 99.901.
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 50), 50.5);
  EXPECT_NEAR(percentile_sorted(v, 90), 90.1, 1e-9);
  EXPECT_NEAR(percentile_sorted(v, 95), 95.05, 1e-9);
  EXPECT_NEAR(percentile_sorted(v, 99), 99.01, 1e-9);
  EXPECT_NEAR(percentile_sorted(v, 99.9), 99.901, 1e-9);
  EXPECT_EQ(percentile_sorted(v, 0), 1);
  EXPECT_EQ(percentile_sorted(v, 100), 100);
  EXPECT_TRUE(std::isnan(percentile_sorted({}, 50)));
  const std::vector<double> one = {7};
  EXPECT_EQ(percentile_sorted(one, 99), 7);
}

TEST(Summary, SortsDropsNanAndReportsEveryPercentile) {
  std::vector<double> v = {5, NAN, 1, 4, 2, 3, NAN};
  const Summary s = summarize(v);
  EXPECT_EQ(s.n, 5u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_NEAR(s.p90, 4.6, 1e-12);
  EXPECT_NEAR(s.get("p99.9"), 4.996, 1e-12);
  EXPECT_EQ(s.get("p999"), s.p999);
  EXPECT_TRUE(std::isnan(s.get("p42")));
  const Summary e = summarize({});
  EXPECT_EQ(e.n, 0u);
  EXPECT_TRUE(std::isnan(e.p99));
  EXPECT_TRUE(std::isnan(e.get("p50")));
}

TEST(Summary, TailOfASkewedDistribution) {
  // 990 requests at 10 ms and 10 at 1000 ms: P99 sits on the boundary, P99.9 in the tail.
  std::vector<double> v(990, 10.0);
  v.insert(v.end(), 10, 1000.0);
  const Summary s = summarize(v);
  EXPECT_EQ(s.p50, 10);
  EXPECT_EQ(s.p95, 10);
  // rank 0.99 * 999 = 989.01: between v[989] = 10 and v[990] = 1000.
  EXPECT_NEAR(s.p99, 10 + 0.01 * 990, 1e-9);
  EXPECT_EQ(s.p999, 1000);
}

TEST(Pearson, PerfectInverseAndUndefined) {
  const std::vector<double> x = {1, 2, 3, 4, 5}, y = {2, 4, 6, 8, 10}, z = {5, 4, 3, 2, 1}, c = {3, 3, 3, 3, 3};
  EXPECT_NEAR(pearson(x, y), 1.0, 1e-12);
  EXPECT_NEAR(pearson(x, z), -1.0, 1e-12);
  EXPECT_TRUE(std::isnan(pearson(x, c)));
  EXPECT_TRUE(std::isnan(pearson(std::vector<double>{1, 2}, std::vector<double>{1, 2})));
  // A hand-computed case: x = 1,2,3,4; y = 1,3,2,4 -> r = 0.8.
  EXPECT_NEAR(pearson(std::vector<double>{1, 2, 3, 4}, std::vector<double>{1, 3, 2, 4}), 0.8, 1e-12);
}

std::vector<CurvePoint> curve_of(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<CurvePoint> c;
  for (size_t i = 0; i < x.size(); ++i) c.push_back({x[i], x[i], y[i]});
  return c;
}

TEST(Knee, HockeyStickKneeAtTheBend) {
  // Flat at 10 ms up to 5 req/s, then +100 ms per req/s.
  std::vector<double> x, y;
  for (int i = 1; i <= 10; ++i) {
    x.push_back(i);
    y.push_back(i <= 5 ? 10 : 10 + 100.0 * (i - 5));
  }
  EXPECT_EQ(find_knee(curve_of(x, y)), 4);  // the point at 5 req/s
}

TEST(Knee, ExponentialTailLatency) {
  // P99 = 20 + exp(x): the bend is where exp takes over, near the high end.
  std::vector<double> x, y;
  for (int i = 1; i <= 12; ++i) {
    x.push_back(i);
    y.push_back(20 + std::exp(double(i)));
  }
  const int k = find_knee(curve_of(x, y));
  EXPECT_GE(k, 7);
  EXPECT_LE(k, 9);
}

TEST(Knee, SaturatedThroughputReadsAsAWall) {
  // Throughput grows to 8 then stays while P99 climbs: the knee is the last point
  // before the wall, not one of the saturated points.
  const std::vector<CurvePoint> c = {{1, 1, 50},  {2, 2, 52},   {4, 4, 55},    {8, 7.9, 70},
                                     {16, 8, 900}, {32, 8, 2500}, {64, 7.8, 5000}};
  EXPECT_EQ(find_knee(c), 3);
}

TEST(Knee, NoneOnStraightConcaveOrShortCurves) {
  EXPECT_EQ(find_knee(curve_of({1, 2, 3, 4, 5}, {10, 20, 30, 40, 50})), -1);
  EXPECT_EQ(find_knee(curve_of({1, 2, 3, 4, 5}, {10, 30, 40, 45, 47})), -1);  // concave
  EXPECT_EQ(find_knee(curve_of({1, 2}, {10, 100})), -1);
  EXPECT_EQ(find_knee(curve_of({1, 2, 3}, {10, 10, 10})), -1);
}

TEST(Cost, PerThousandRequestsAndPerMillionTokens) {
  // $3.60/h = $0.001/s; 10 req/s -> $0.0001/request -> $0.10 per 1000.
  const Cost c = cost_at_throughput({3.6, 10, 1000});
  EXPECT_NEAR(c.per_1k_requests, 0.1, 1e-12);
  EXPECT_NEAR(c.per_1m_output_tokens, 1.0, 1e-12);  // $0.001/s over 1000 tok/s
  const Cost z = cost_at_throughput({3.6, 0, 0});
  EXPECT_TRUE(std::isnan(z.per_1k_requests));
  EXPECT_TRUE(std::isnan(z.per_1m_output_tokens));
}

TEST(Cost, TierSharesSumToTheInstancePrice) {
  // Two tiers: 2 req/s at 100 tok/s and 8 req/s at 300 tok/s on a $4/h instance.
  const double s1 = tier_cost_share(100, 400, 2, 10), s2 = tier_cost_share(300, 400, 8, 10);
  EXPECT_DOUBLE_EQ(s1 + s2, 1.0);
  const Cost c1 = tier_cost(4, s1, 2, 100), c2 = tier_cost(4, s2, 8, 300);
  // Per-hour spend recomputed from each tier's cost per request equals the price.
  const double spend = c1.per_1k_requests / 1000 * 2 * 3600 + c2.per_1k_requests / 1000 * 8 * 3600;
  EXPECT_NEAR(spend, 4.0, 1e-9);
  // Tokens cost the same per token in every tier under token-share attribution.
  EXPECT_NEAR(c1.per_1m_output_tokens, c2.per_1m_output_tokens, 1e-9);
  EXPECT_DOUBLE_EQ(tier_cost_share(0, 0, 3, 12), 0.25);  // no tokens: by requests
}

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }
double cv_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size())) / m;
}
std::vector<double> gaps_s(const std::vector<int64_t>& t) {
  std::vector<double> g;
  for (size_t i = 1; i < t.size(); ++i) g.push_back(double(t[i] - t[i - 1]) / 1e9);
  return g;
}

TEST(Arrival, ConstantIsEvenlySpacedFromZero) {
  Rng rng(1);
  const auto t = arrival_schedule({ArrivalKind::kConstant, 10, 1, 0}, 0, 1'000'000'000, rng);
  ASSERT_EQ(t.size(), 10u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i], int64_t(i) * 100'000'000);
  Rng r2(1);
  EXPECT_EQ(arrival_schedule({ArrivalKind::kConstant, 10, 1, 0}, 3, 0, r2).size(), 3u);
}

TEST(Arrival, PoissonIsSeededWithTheRightRateAndCv) {
  Rng a(42), b(42), c(43);
  const ArrivalSpec spec{ArrivalKind::kPoisson, 50, 1, 0};
  const auto ta = arrival_schedule(spec, 20000, 0, a);
  EXPECT_EQ(ta, arrival_schedule(spec, 20000, 0, b));
  EXPECT_NE(ta, arrival_schedule(spec, 20000, 0, c));
  const auto g = gaps_s(ta);
  EXPECT_NEAR(mean_of(g), 1.0 / 50, 0.02 / 50 * 2);
  EXPECT_NEAR(cv_of(g), 1.0, 0.03);
  for (size_t i = 1; i < ta.size(); ++i) ASSERT_GE(ta[i], ta[i - 1]);
}

TEST(Arrival, GammaBurstinessSetsTheGapCv) {
  for (double cv : {0.5, 2.0, 3.0}) {
    Rng rng(7);
    const auto t = arrival_schedule({ArrivalKind::kGamma, 20, cv, 0}, 40000, 0, rng);
    const auto g = gaps_s(t);
    EXPECT_NEAR(mean_of(g), 1.0 / 20, 0.05 / 20) << "cv " << cv;
    EXPECT_NEAR(cv_of(g), cv, 0.08 * cv) << "cv " << cv;
  }
}

TEST(Arrival, GammaSamplerMeanAndVariance) {
  for (double shape : {0.25, 1.0, 4.0}) {
    Rng rng(3);
    std::vector<double> v;
    for (int i = 0; i < 40000; ++i) v.push_back(sample_gamma(rng, shape));
    EXPECT_NEAR(mean_of(v), shape, 0.03 * shape + 0.01) << shape;
    const double m = mean_of(v);
    double var = 0;
    for (double x : v) var += (x - m) * (x - m);
    EXPECT_NEAR(var / double(v.size()), shape, 0.06 * shape + 0.01) << shape;
  }
}

TEST(Arrival, LinearRampHalvesTheArrivalsDuringTheRamp) {
  Rng rng(1);
  // 10 req/s after a 4 s ramp: 4 * 10 / 2 = 20 arrivals in the ramp, 10/s after it.
  const auto t = arrival_schedule({ArrivalKind::kConstant, 10, 1, 4}, 0, 6'000'000'000, rng);
  size_t in_ramp = 0;
  for (int64_t x : t) in_ramp += x < 4'000'000'000 ? 1 : 0;
  EXPECT_EQ(in_ramp, 20u);
  EXPECT_EQ(t.size() - in_ramp, 20u);
  // Gaps shrink through the ramp.
  EXPECT_GT(t[2] - t[1], t[15] - t[14]);
}

TEST(Arrival, ParsesKinds) {
  EXPECT_EQ(*parse_arrival_kind("gamma"), ArrivalKind::kGamma);
  EXPECT_FALSE(parse_arrival_kind("uniform").is_ok());
}

}  // namespace
}  // namespace ts::bench
