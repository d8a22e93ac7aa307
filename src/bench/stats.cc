#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ts::bench {

double percentile_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) return NAN;
  if (q <= 0) return sorted.front();
  if (q >= 100) return sorted.back();
  // Rank h on 0..n-1; interpolate between floor(h) and the next value.
  const double h = (q / 100.0) * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - double(lo)) * (sorted[hi] - sorted[lo]);
}

double Summary::get(const char* key) const {
  if (n == 0) return NAN;
  struct Entry {
    const char* name;
    double Summary::*field;
  };
  static const Entry kEntries[] = {
      {"min", &Summary::min},   {"p50", &Summary::p50},    {"p90", &Summary::p90},
      {"p95", &Summary::p95},   {"p99", &Summary::p99},    {"p99.9", &Summary::p999},
      {"p999", &Summary::p999}, {"max", &Summary::max},    {"mean", &Summary::mean},
      {"median", &Summary::p50},
  };
  for (const Entry& e : kEntries)
    if (!std::strcmp(e.name, key)) return this->*e.field;
  return NAN;
}

Summary summarize(std::vector<double> values) {
  // NaN means "not measured for this request" (e.g. no TTFT on a failed request).
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  Summary s;
  s.n = values.size();
  if (values.empty()) {
    s.min = s.p50 = s.p90 = s.p95 = s.p99 = s.p999 = s.max = s.mean = NAN;
    return s;
  }
  std::sort(values.begin(), values.end());
  s.min = values.front();
  s.max = values.back();
  s.p50 = percentile_sorted(values, 50);
  s.p90 = percentile_sorted(values, 90);
  s.p95 = percentile_sorted(values, 95);
  s.p99 = percentile_sorted(values, 99);
  s.p999 = percentile_sorted(values, 99.9);
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / double(values.size());
  return s;
}

double pearson(std::span<const double> x, std::span<const double> y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 3) return NAN;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= double(n);
  my /= double(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    const double dx = x[i] - mx, dy = y[i] - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx <= 0 || syy <= 0) return NAN;
  return sxy / std::sqrt(sxx * syy);
}

}  // namespace ts::bench
