// Metric registry: families declared up front (a list of MetricDef, see
// metrics/tierserve_metrics.h), series created per label values on first use, values
// updated lock-free. Rendering is elsewhere (metrics/prometheus.h) and works on a
// Snapshot, so the format is tested apart from the registry.
//
// Hot path: look a series up once (counter()/gauge()/histogram() take a mutex and return
// a pointer that stays valid for the registry's lifetime), then update it with atomics
// from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace ts::metrics {

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };

struct MetricDef {
  std::string name;                 // Prometheus name with its unit: ..._seconds, ..._total
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<std::string> labels;  // label names, e.g. {"tier"}
  std::vector<double> buckets;      // histograms: finite upper bounds, ascending
};

class Counter {
 public:
  void inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  void add(double d) { v_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0.0};
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), the last one is +Inf.
  uint64_t bucket(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

// A consistent-enough copy for rendering (each value read atomically; a scrape during
// updates may see a histogram's count one ahead of its buckets, as in every client).
struct SeriesSnapshot {
  std::vector<std::string> label_values;
  double value = 0;                 // counter or gauge
  std::vector<uint64_t> cumulative; // histogram: per bound, then +Inf (== count)
  double sum = 0;
  uint64_t count = 0;
};

struct FamilySnapshot {
  MetricDef def;
  std::vector<SeriesSnapshot> series;  // sorted by label values
};

using Snapshot = std::vector<FamilySnapshot>;  // in definition order

class Registry {
 public:
  // kInvalidArgument for a bad name, a duplicate, unsorted buckets, a label named "le"
  // on a histogram.
  static Result<std::unique_ptr<Registry>> create(std::vector<MetricDef> defs);

  size_t n_families() const { return families_.size(); }
  const MetricDef& def(size_t family) const { return families_[family].def; }
  // Index of the family named `name`, or -1.
  int find(const std::string& name) const;

  // The series of `family` with these label values (one per label of the definition),
  // created on first use. Asking for the wrong type or label count is a bug (TS_CHECK).
  Counter* counter(size_t family, const std::vector<std::string>& label_values = {});
  Gauge* gauge(size_t family, const std::vector<std::string>& label_values = {});
  Histogram* histogram(size_t family, const std::vector<std::string>& label_values = {});

  Snapshot snapshot() const;

 private:
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    MetricDef def;
    std::map<std::vector<std::string>, Series> series;  // GUARDED_BY(mu_)
  };

  explicit Registry(std::vector<MetricDef> defs);
  Series& series(size_t family, MetricType type, const std::vector<std::string>& label_values);

  mutable std::mutex mu_;
  std::vector<Family> families_;
};

}  // namespace ts::metrics
