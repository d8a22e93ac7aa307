#include "metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/check.h"

namespace ts::metrics {

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // Prometheus buckets are "less than or equal": the first bound >= v.
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

bool valid_name(const std::string& s, bool allow_colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Registry>> Registry::create(std::vector<MetricDef> defs) {
  std::set<std::string> names;
  for (const MetricDef& d : defs) {
    if (!valid_name(d.name, true)) return invalid_argument("metric name '" + d.name + "' is not valid");
    if (!names.insert(d.name).second) return invalid_argument("metric '" + d.name + "' declared twice");
    std::set<std::string> labels;
    for (const std::string& l : d.labels) {
      if (!valid_name(l, false) || l.rfind("__", 0) == 0) return invalid_argument(d.name + ": bad label '" + l + "'");
      if (!labels.insert(l).second) return invalid_argument(d.name + ": label '" + l + "' twice");
      if (d.type == MetricType::kHistogram && l == "le") return invalid_argument(d.name + ": 'le' is reserved");
    }
    if (d.type == MetricType::kHistogram) {
      if (d.buckets.empty()) return invalid_argument(d.name + ": a histogram needs buckets");
      for (size_t i = 0; i < d.buckets.size(); ++i)
        if (!std::isfinite(d.buckets[i]) || (i > 0 && d.buckets[i] <= d.buckets[i - 1]))
          return invalid_argument(d.name + ": buckets must be finite and ascending");
    }
  }
  return std::unique_ptr<Registry>(new Registry(std::move(defs)));
}

Registry::Registry(std::vector<MetricDef> defs) {
  for (MetricDef& d : defs) families_.push_back(Family{std::move(d), {}});
  // Unlabeled families have exactly one series; create it so that it renders as 0.
  for (size_t f = 0; f < families_.size(); ++f)
    if (families_[f].def.labels.empty()) series(f, families_[f].def.type, {});
}

int Registry::find(const std::string& name) const {
  for (size_t i = 0; i < families_.size(); ++i)
    if (families_[i].def.name == name) return int(i);
  return -1;
}

Registry::Series& Registry::series(size_t family, MetricType type, const std::vector<std::string>& label_values) {
  TS_CHECK(family < families_.size());
  Family& f = families_[family];
  TS_CHECK_MSG(f.def.type == type, f.def.name.c_str());
  TS_CHECK_MSG(label_values.size() == f.def.labels.size(), f.def.name.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = f.series[label_values];
  switch (type) {
    case MetricType::kCounter:
      if (!s.counter) s.counter = std::make_unique<Counter>();
      break;
    case MetricType::kGauge:
      if (!s.gauge) s.gauge = std::make_unique<Gauge>();
      break;
    case MetricType::kHistogram:
      if (!s.histogram) s.histogram = std::make_unique<Histogram>(f.def.buckets);
      break;
  }
  return s;
}

Counter* Registry::counter(size_t family, const std::vector<std::string>& lv) {
  return series(family, MetricType::kCounter, lv).counter.get();
}
Gauge* Registry::gauge(size_t family, const std::vector<std::string>& lv) {
  return series(family, MetricType::kGauge, lv).gauge.get();
}
Histogram* Registry::histogram(size_t family, const std::vector<std::string>& lv) {
  return series(family, MetricType::kHistogram, lv).histogram.get();
}

Snapshot Registry::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot out;
  out.reserve(families_.size());
  for (const Family& f : families_) {
    FamilySnapshot fs;
    fs.def = f.def;
    for (const auto& [labels, s] : f.series) {
      SeriesSnapshot ss;
      ss.label_values = labels;
      if (s.counter) ss.value = double(s.counter->value());
      if (s.gauge) ss.value = s.gauge->value();
      if (s.histogram) {
        const Histogram& h = *s.histogram;
        uint64_t cum = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          cum += h.bucket(i);
          ss.cumulative.push_back(cum);
        }
        ss.sum = h.sum();
        ss.count = cum;  // consistent with the buckets
      }
      fs.series.push_back(std::move(ss));
    }
    out.push_back(std::move(fs));
  }
  return out;
}

}  // namespace ts::metrics
