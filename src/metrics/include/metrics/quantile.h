// Percentiles from fixed-bucket histograms (for /v1/stats: P50/P95/P99 per tier), the
// way Prometheus' histogram_quantile() estimates them: find the bucket holding the rank
// and interpolate linearly inside it. Precision is the bucket width; the answer never
// leaves the bucket that holds the true quantile.
#pragma once

#include <cstdint>
#include <span>

#include "metrics/registry.h"

namespace ts::metrics {

// q in [0, 1]; `bounds` the finite upper bounds, `cumulative` one count per bound then the
// +Inf count. NaN when empty. In the +Inf bucket: the highest finite bound. The first
// bucket interpolates from 0 (latencies are never negative).
double histogram_quantile(double q, std::span<const double> bounds, std::span<const uint64_t> cumulative);

// What was observed between two snapshots of the same series (later minus earlier), for
// percentiles over a recent window rather than since start.
SeriesSnapshot histogram_delta(const SeriesSnapshot& later, const SeriesSnapshot& earlier);

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0;
  uint64_t count = 0;
};
Percentiles percentiles(const MetricDef& def, const SeriesSnapshot& s);

}  // namespace ts::metrics
