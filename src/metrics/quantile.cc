#include "metrics/quantile.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace ts::metrics {

double histogram_quantile(double q, std::span<const double> bounds, std::span<const uint64_t> cumulative) {
  TS_CHECK(cumulative.size() == bounds.size() + 1);
  const uint64_t total = cumulative.back();
  if (total == 0 || std::isnan(q)) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * double(total);
  size_t i = 0;
  while (i < bounds.size() && double(cumulative[i]) < rank) ++i;
  if (i == bounds.size()) return bounds.empty() ? std::numeric_limits<double>::quiet_NaN() : bounds.back();
  const double lo = i == 0 ? std::min(0.0, bounds[0]) : bounds[i - 1];
  const double below = i == 0 ? 0.0 : double(cumulative[i - 1]);
  const double in_bucket = double(cumulative[i]) - below;
  if (in_bucket <= 0) return bounds[i];
  return lo + (bounds[i] - lo) * (rank - below) / in_bucket;
}

SeriesSnapshot histogram_delta(const SeriesSnapshot& later, const SeriesSnapshot& earlier) {
  SeriesSnapshot d = later;
  if (earlier.cumulative.size() != later.cumulative.size()) return d;  // earlier: nothing yet
  for (size_t i = 0; i < d.cumulative.size(); ++i)
    d.cumulative[i] = later.cumulative[i] >= earlier.cumulative[i] ? later.cumulative[i] - earlier.cumulative[i] : 0;
  d.sum = later.sum - earlier.sum;
  d.count = d.cumulative.empty() ? 0 : d.cumulative.back();
  return d;
}

Percentiles percentiles(const MetricDef& def, const SeriesSnapshot& s) {
  Percentiles p;
  p.count = s.count;
  p.p50 = histogram_quantile(0.50, def.buckets, s.cumulative);
  p.p95 = histogram_quantile(0.95, def.buckets, s.cumulative);
  p.p99 = histogram_quantile(0.99, def.buckets, s.cumulative);
  return p;
}

}  // namespace ts::metrics
