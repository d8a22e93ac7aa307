// Prometheus text exposition format (version 0.0.4) of a registry Snapshot. Apart from
// the registry so that the format has its own golden-text test (seastar's split).
#pragma once

#include <string>
#include <string_view>

#include "metrics/registry.h"

namespace ts::metrics {

inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// # HELP / # TYPE per family, then one line per sample; histograms as _bucket{le=...}
// (cumulative, ending with le="+Inf"), _sum and _count.
std::string format_prometheus(const Snapshot& snap);

// Helpers, exposed for tests: a sample value ("NaN", "+Inf", shortest round-trip
// decimal), a label value with \, " and newline escaped, help text with \ and newline.
std::string format_value(double v);
std::string escape_label_value(std::string_view s);
std::string escape_help(std::string_view s);

}  // namespace ts::metrics
