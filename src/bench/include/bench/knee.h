// The knee of a throughput-vs-P99 curve: the last point before tail latency turns
// steep, i.e. the highest load worth running at.
#pragma once

#include <span>

namespace ts::bench {

struct CurvePoint {
  double offered = 0;         // the swept setting: requests/s or concurrency
  double throughput_rps = 0;  // completed requests per second
  double p99_ms = 0;          // P99 of the swept latency metric (TTFT or end-to-end)
};

// Kneedle on the curve (throughput on x, P99 on y), both normalized to [0, 1] by their
// range: the knee is the point furthest below the chord from the first to the last
// point, where throughput is already high but P99 has not yet taken off. Throughput is
// taken as its running maximum so a saturated server (throughput flat, P99 rising) reads
// as a vertical wall. Returns the point's index, or -1 when there are fewer than 3
// points or the curve never bends below the chord by more than `min_gap` (a straight or
// concave curve has no knee).
int find_knee(std::span<const CurvePoint> curve, double min_gap = 0.05);

}  // namespace ts::bench
