#include "bench/slo.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace ts::bench {

namespace {

const char* const kLatencyMetrics[] = {"ttft", "itl", "tpot", "e2e", "queue"};
const char* const kStats[] = {"min", "p50", "p90", "p95", "p99", "p99.9", "p999", "max", "mean"};
const char* const kRates[] = {"error_rate", "degradation_rate"};
const char* const kThroughputs[] = {"throughput_rps", "output_tok_s", "goodput_rps"};

template <size_t N>
bool one_of(const std::string& s, const char* const (&set)[N]) {
  for (const char* x : set)
    if (s == x) return true;
  return false;
}

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Parses "<= 300ms", "0.3s", "1%", ">= 2", "300" into a comparison and a value in the
// check's unit (ms for latency, fraction for rates).
Status parse_limit(const std::string& where, std::string text, bool latency, bool rate, SloCheck* c) {
  text = trim(text);
  if (text.rfind("<=", 0) == 0 || text.rfind("≤", 0) == 0) {
    c->at_least = false;
    text = trim(text.substr(text[0] == '<' ? 2 : std::string("≤").size()));
  } else if (text.rfind(">=", 0) == 0 || text.rfind("≥", 0) == 0) {
    c->at_least = true;
    text = trim(text.substr(text[0] == '>' ? 2 : std::string("≥").size()));
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v)) return invalid_argument(where + ": '" + text + "' is not a number");
  const std::string unit = trim(std::string(end));
  double scale = 1;
  if (latency) {
    if (unit.empty() || unit == "ms") scale = 1;
    else if (unit == "s") scale = 1000;
    else if (unit == "us") scale = 1e-3;
    else return invalid_argument(where + ": unknown latency unit '" + unit + "' (ms, s, us)");
  } else if (rate) {
    if (unit == "%") scale = 0.01;
    else if (!unit.empty()) return invalid_argument(where + ": unknown rate unit '" + unit + "' (a fraction or %)");
  } else if (!unit.empty() && unit != "/s" && unit != "rps") {
    return invalid_argument(where + ": unknown throughput unit '" + unit + "'");
  }
  c->limit = v * scale;
  if (c->limit < 0) return invalid_argument(where + ": a limit must be >= 0");
  return Status::ok();
}

Result<SloCheck> parse_check(const std::string& tier, const std::string& key, const std::string& value) {
  const std::string where = "SLO " + tier + "." + key;
  SloCheck c;
  c.key = key;
  bool latency = false, rate = false;
  if (one_of(key, kRates)) {
    c.metric = key;
    rate = true;
  } else if (one_of(key, kThroughputs)) {
    c.metric = key;
    c.at_least = true;
  } else {
    const size_t us = key.find('_');
    if (us == std::string::npos) return invalid_argument(where + ": unknown metric");
    c.metric = key.substr(0, us);
    c.stat = key.substr(us + 1);
    if (!one_of(c.metric, kLatencyMetrics) || !one_of(c.stat, kStats))
      return invalid_argument(where + ": unknown metric (want <ttft|itl|tpot|e2e|queue>_<min|p50|p90|p95|p99|p99.9|max|mean>, "
                              "error_rate, degradation_rate, throughput_rps, output_tok_s or goodput_rps)");
    if (c.stat == "p999") c.stat = "p99.9";
    latency = true;
  }
  TS_RETURN_IF_ERROR(parse_limit(where, value, latency, rate, &c));
  return c;
}

double min_limit(const SloSpec& s, const std::string& tier, const char* metric) {
  double out = NAN;
  for (const auto& [name, checks] : s.tiers) {
    if (name != tier && name != "overall") continue;
    for (const SloCheck& c : checks)
      if (c.metric == metric && !c.at_least && c.stat != "min" && c.stat != "mean")
        out = std::isnan(out) ? c.limit : std::min(out, c.limit);
  }
  return out;
}

}  // namespace

SloSpec::RequestLimits SloSpec::request_limits(const std::string& tier) const {
  return {min_limit(*this, tier, "ttft"), min_limit(*this, tier, "tpot"), min_limit(*this, tier, "e2e"),
          min_limit(*this, tier, "itl")};
}

Result<SloSpec> parse_slo_text(const std::string& text) {
  SloSpec spec;
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) return invalid_argument("SLO file: want a map of tier -> {metric: limit}");
    for (const auto& tier_node : root) {
      const std::string tier = tier_node.first.as<std::string>();
      if (!tier_node.second.IsMap()) return invalid_argument("SLO " + tier + ": want a map of metric -> limit");
      std::vector<SloCheck> checks;
      for (const auto& kv : tier_node.second) {
        if (!kv.second.IsScalar()) return invalid_argument("SLO " + tier + "." + kv.first.as<std::string>() + ": want a number or a string");
        auto c = parse_check(tier, kv.first.as<std::string>(), kv.second.as<std::string>());
        if (!c.is_ok()) return c.status();
        checks.push_back(*c);
      }
      spec.tiers.emplace_back(tier, std::move(checks));
    }
  } catch (const YAML::Exception& e) {
    return invalid_argument(std::string("SLO file: ") + e.what());
  }
  return spec;
}

Result<SloSpec> load_slo_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open SLO file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_slo_text(ss.str());
  if (!r.is_ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

std::vector<TierVerdict> evaluate_slo(const SloSpec& slo, const MetricSource& m) {
  std::vector<TierVerdict> out;
  for (const auto& [tier, checks] : slo.tiers) {
    TierVerdict v;
    v.tier = tier;
    v.missing = !m.has_tier(tier);
    for (const SloCheck& c : checks) {
      SloResult r;
      r.check = c;
      r.measured = m.value(tier, c.metric, c.stat);
      // No data is a failure: an SLO cannot pass on requests that never completed.
      r.pass = !std::isnan(r.measured) && (c.at_least ? r.measured >= c.limit : r.measured <= c.limit);
      v.pass = v.pass && r.pass;
      v.results.push_back(r);
    }
    if (v.missing) v.pass = false;
    out.push_back(std::move(v));
  }
  return out;
}

bool all_pass(const std::vector<TierVerdict>& v) {
  for (const auto& t : v)
    if (!t.pass) return false;
  return true;
}

}  // namespace ts::bench
