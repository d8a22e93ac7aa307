// Pure statistics for the load tester: percentiles, summaries and correlation.
//
// Everything here is a function of its arguments (no clock, no I/O), so the numbers a
// report prints can be checked against hand-computed data in unit tests.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace ts::bench {

// Percentile of already-sorted values, q in [0, 100], by linear interpolation between
// the two closest ranks (numpy's default "linear" method, so results match what people
// compute in notebooks). Empty input gives NaN.
double percentile_sorted(std::span<const double> sorted, double q);

// The latency summary every metric gets: min, P50, P90, P95, P99, P99.9, max and mean.
// All NaN (and n == 0) for no data, which reports print as "-".
struct Summary {
  size_t n = 0;
  double min = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0, max = 0, mean = 0;
  // The percentile named by a key: "min", "p50", "p90", "p95", "p99", "p99.9"/"p999",
  // "max", "mean". NaN for an unknown key or no data.
  double get(const char* key) const;
};
Summary summarize(std::vector<double> values);

// Pearson correlation of paired samples; NaN when fewer than 3 pairs or either side has
// zero variance (the correlation is undefined, not zero).
double pearson(std::span<const double> x, std::span<const double> y);

}  // namespace ts::bench
