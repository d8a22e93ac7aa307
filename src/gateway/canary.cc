#include "gateway/canary.h"

#include <algorithm>
#include <cstdio>

namespace ts::gateway {

using json = nlohmann::json;

void ReleaseWindow::add(const ReleaseSample& s) {
  samples_.push_back(s);
  while (samples_.size() > kMaxSamples) samples_.pop_front();
}

void ReleaseWindow::prune(int64_t now_ns, int64_t window_ns) {
  while (!samples_.empty() && samples_.front().t_ns < now_ns - window_ns) samples_.pop_front();
}

namespace {

double p99(std::vector<double>& v) {
  if (v.empty()) return -1;
  const size_t k = std::min(v.size() - 1, size_t(double(v.size()) * 0.99));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

std::string fmt(const char* f, double a, double b, double c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

}  // namespace

TierStats ReleaseWindow::stats(int tier) const {
  TierStats t;
  std::vector<double> ttft, tpot;
  int64_t err = 0, to = 0, deg = 0;
  double cost = 0;
  for (const ReleaseSample& s : samples_) {
    if (s.tier != tier) continue;
    ++t.n;
    if (s.ttft_s >= 0) ttft.push_back(s.ttft_s);
    if (s.tpot_s >= 0) tpot.push_back(s.tpot_s);
    err += s.error;
    to += s.timeout;
    deg += s.degraded;
    cost += s.cost;
  }
  if (t.n == 0) return t;
  t.ttft_p99 = p99(ttft);
  t.tpot_p99 = p99(tpot);
  t.error_rate = double(err) / double(t.n);
  t.timeout_rate = double(to) / double(t.n);
  t.degradation_rate = double(deg) / double(t.n);
  t.cost_per_1000 = cost / double(t.n) * 1000;
  return t;
}

CanaryVerdict judge(const CanaryConfig& c, const ReleaseWindow& stable, const ReleaseWindow& canary,
                    const std::vector<std::string>& tier_names) {
  CanaryVerdict v;
  v.compared = json::object();
  int compared = 0;
  for (int t = 0; t < int(tier_names.size()); ++t) {
    const TierStats s = stable.stats(t), k = canary.stats(t);
    if (s.n == 0 && k.n == 0) continue;
    auto side = [](const TierStats& x) {
      return json{{"requests", x.n},           {"ttft_p99_s", x.ttft_p99},       {"tpot_p99_s", x.tpot_p99},
                  {"error_rate", x.error_rate}, {"timeout_rate", x.timeout_rate}, {"degradation_rate", x.degradation_rate},
                  {"cost_per_1000", x.cost_per_1000}};
    };
    v.compared[tier_names[size_t(t)]] = {{"stable", side(s)}, {"canary", side(k)}};
    if (s.n < c.min_requests || k.n < c.min_requests) continue;
    ++compared;
    const std::string& tn = tier_names[size_t(t)];
    auto ratio = [&](const char* what, double a, double b, double limit) {
      if (a < 0 || b <= 0) return;
      if (a / b > limit) v.reasons.push_back(tn + ": " + what + fmt(" %.4g vs %.4g (ratio %.3g", a, b, a / b) + " > " + fmt("%.3g)", limit, 0, 0));
    };
    auto delta = [&](const char* what, double a, double b, double limit) {
      if (a - b > limit) v.reasons.push_back(tn + ": " + what + fmt(" %.4g vs %.4g (+%.3g", a, b, a - b) + " > " + fmt("%.3g)", limit, 0, 0));
    };
    ratio("TTFT P99 s", k.ttft_p99, s.ttft_p99, c.ttft_p99_ratio);
    ratio("TPOT P99 s", k.tpot_p99, s.tpot_p99, c.tpot_p99_ratio);
    ratio("cost per 1000 requests", k.cost_per_1000, s.cost_per_1000, c.cost_ratio);
    delta("error rate", k.error_rate, s.error_rate, c.error_rate_delta);
    delta("timeout rate", k.timeout_rate, s.timeout_rate, c.timeout_rate_delta);
    delta("degradation rate", k.degradation_rate, s.degradation_rate, c.degradation_rate_delta);
  }
  if (!v.reasons.empty()) {
    v.kind = CanaryVerdict::kRollback;
  } else if (compared > 0) {
    v.kind = CanaryVerdict::kAdvance;
  } else {
    v.reasons.push_back("fewer than " + std::to_string(c.min_requests) + " requests of a tier on each version in the window");
  }
  return v;
}

}  // namespace ts::gateway
