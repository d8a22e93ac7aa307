#include "bench/knee.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ts::bench {

int find_knee(std::span<const CurvePoint> curve, double min_gap) {
  const size_t n = curve.size();
  if (n < 3) return -1;
  std::vector<double> x(n), y(n);
  double run_max = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    run_max = std::max(run_max, curve[i].throughput_rps);
    x[i] = run_max;
    y[i] = curve[i].p99_ms;
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return -1;
  }
  const double x0 = x.front(), x1 = x.back();
  const double y0 = *std::min_element(y.begin(), y.end()), y1 = *std::max_element(y.begin(), y.end());
  if (!(x1 > x0) || !(y1 > y0)) return -1;  // no throughput gain or no latency change
  // Distance below the chord from the first to the last normalized point. With both
  // axes in [0, 1] and the chord from (0, yn0) to (1, yn1) this is the Kneedle
  // difference curve, generalized to curves that do not start at the minimum.
  const double yn_first = (y.front() - y0) / (y1 - y0), yn_last = (y.back() - y0) / (y1 - y0);
  int best = -1;
  double best_gap = min_gap;
  for (size_t i = 1; i + 1 < n; ++i) {
    const double xn = (x[i] - x0) / (x1 - x0), yn = (y[i] - y0) / (y1 - y0);
    const double chord = yn_first + xn * (yn_last - yn_first);
    const double gap = chord - yn;
    if (gap > best_gap) {
      best_gap = gap;
      best = int(i);
    }
  }
  return best;
}

}  // namespace ts::bench
