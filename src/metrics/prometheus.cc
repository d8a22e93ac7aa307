#include "metrics/prometheus.h"

#include <charconv>
#include <cmath>

namespace ts::metrics {

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string escape_help(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

namespace {

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// {a="x",b="y"} plus an optional extra label (le); empty when there are none.
std::string labels(const MetricDef& d, const SeriesSnapshot& s, const char* extra_name = nullptr,
                   const std::string& extra_value = "") {
  std::string o;
  for (size_t i = 0; i < d.labels.size(); ++i) {
    o += o.empty() ? "{" : ",";
    o += d.labels[i] + "=\"" + escape_label_value(s.label_values[i]) + "\"";
  }
  if (extra_name) {
    o += o.empty() ? "{" : ",";
    o += std::string(extra_name) + "=\"" + extra_value + "\"";
  }
  if (!o.empty()) o += "}";
  return o;
}

}  // namespace

std::string format_prometheus(const Snapshot& snap) {
  std::string o;
  for (const FamilySnapshot& f : snap) {
    const MetricDef& d = f.def;
    o += "# HELP " + d.name + " " + escape_help(d.help) + "\n";
    o += "# TYPE " + d.name + " " + type_name(d.type) + "\n";
    for (const SeriesSnapshot& s : f.series) {
      if (d.type != MetricType::kHistogram) {
        o += d.name + labels(d, s) + " " + format_value(s.value) + "\n";
        continue;
      }
      for (size_t i = 0; i < s.cumulative.size(); ++i) {
        const std::string le = i < d.buckets.size() ? format_value(d.buckets[i]) : "+Inf";
        o += d.name + "_bucket" + labels(d, s, "le", le) + " " + std::to_string(s.cumulative[i]) + "\n";
      }
      o += d.name + "_sum" + labels(d, s) + " " + format_value(s.sum) + "\n";
      o += d.name + "_count" + labels(d, s) + " " + std::to_string(s.count) + "\n";
    }
  }
  return o;
}

}  // namespace ts::metrics
