#include "gateway/release.h"

#include <algorithm>
#include <chrono>

namespace ts::gateway {

using json = nlohmann::json;

namespace {

// FNV-1a, then a 64-bit finalizer: a sticky id's place in [0, 1), the same on every replica.
double unit_interval(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return double(h >> 11) * 0x1.0p-53;
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Releases::Releases(const GatewayConfig& cfg, const std::vector<std::string>& models, const Clock& clock)
    : models_(models), clock_(clock) {
  for (const TierConfig& t : cfg.tiers) tier_names_.push_back(t.name);
  rel_.resize(models.size());
  for (size_t m = 0; m < models.size(); ++m) rel_[m].name = models[m];
  for (const WorkerConfig& w : cfg.workers) {
    const int m = int(std::find(models.begin(), models.end(), w.model) - models.begin());
    int u = -1;
    for (int k : rel_[size_t(m)].units)
      if (units_[size_t(k)].version == w.version) u = k;
    if (u < 0) {
      u = int(units_.size());
      units_.push_back({m, w.version});
      unit_workers_.emplace_back();
      rel_[size_t(m)].units.push_back(u);
    }
    worker_unit_.push_back(u);
    unit_workers_[size_t(u)].push_back(w.name);
  }
  for (Release& r : rel_) {
    std::sort(r.units.begin(), r.units.end(), [&](int a, int b) { return units_[size_t(a)].version < units_[size_t(b)].version; });
    r.weights.assign(r.units.size(), 0.0);
    auto it = cfg.releases.find(r.name);
    if (it == cfg.releases.end()) {  // one version (validated): it takes everything
      r.weights.assign(r.units.size(), 1.0);
      r.stable = 0;
      continue;
    }
    r.sticky = it->second.sticky;
    r.canary = it->second.canary;
    for (size_t i = 0; i < r.units.size(); ++i) {
      const std::string& v = units_[size_t(r.units[i])].version;
      if (auto w = it->second.weights.find(v); w != it->second.weights.end()) r.weights[i] = w->second;
      if (v == it->second.stable) r.stable = int(i);
      if (!r.canary.version.empty() && v == r.canary.version) r.canary_i = int(i);
      if (!it->second.shadow.version.empty() && v == it->second.shadow.version) {
        r.shadow_unit = r.units[i];
        r.shadow_fraction = it->second.shadow.fraction;
      }
    }
    if (r.canary_i >= 0 && r.stable >= 0) {
      r.canary_state = "ramping";
      set_step_locked(r, 0);
      log_locked(r, "canary_start", "config", {{"version", r.canary.version}, {"percent", r.canary.steps[0]}});
    } else {
      r.canary_i = -1;
    }
  }
  windows_.resize(units_.size());
}

// The canary's share at `step`, the stable version the rest, every other version none.
void Releases::set_step_locked(Release& r, int step) {
  r.step = step;
  r.step_since_ns = clock_.now_ns();
  r.next_ns = r.step_since_ns + r.canary.interval_ms * 1000000;
  const double pct = r.canary.steps[size_t(step)];
  for (size_t i = 0; i < r.weights.size(); ++i)
    r.weights[i] = int(i) == r.canary_i ? pct : int(i) == r.stable ? 100.0 - pct : 0.0;
}

void Releases::stop_canary_locked(Release& r, const std::string& why) {
  if (r.canary_state != "ramping") return;
  r.canary_state = "stopped";
  r.events.push_back({{"at_ms", unix_ms()}, {"event", "canary_stopped"}, {"by", why}});
}

int Releases::shadow_for(int model, int unit) {
  const Release& r = rel_[size_t(model)];
  if (r.shadow_unit < 0 || r.shadow_unit == unit || r.shadow_fraction <= 0) return -1;
  std::lock_guard<std::mutex> lk(mu_);
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return double(rng_ >> 11) * 0x1.0p-53 < r.shadow_fraction ? r.shadow_unit : -1;
}

void Releases::record(int unit, const ReleaseSample& s) {
  const Release& r = rel_[size_t(units_[size_t(unit)].model)];
  std::lock_guard<std::mutex> lk(mu_);
  if (r.canary_i < 0 || r.canary_state != "ramping") return;
  windows_[size_t(unit)].add(s);
}

std::vector<Releases::Decision> Releases::tick() {
  std::vector<Decision> out;
  const int64_t now = clock_.now_ns();
  std::lock_guard<std::mutex> lk(mu_);
  for (Release& r : rel_) {
    if (r.canary_i < 0 || r.canary_state != "ramping" || now < r.next_ns) continue;
    r.next_ns = now + r.canary.interval_ms * 1000000;
    const int su = r.units[size_t(r.stable)], cu = r.units[size_t(r.canary_i)];
    const int64_t window_ns = r.canary.window_ms * 1000000;
    // A stable version that gets no traffic (a 100% step) is judged by its last window
    // before the step, kept as it was.
    const bool stable_idle = r.weights[size_t(r.stable)] <= 0;
    windows_[size_t(su)].prune(stable_idle ? r.step_since_ns : now, window_ns);
    windows_[size_t(cu)].prune(now, window_ns);
    const CanaryVerdict v = judge(r.canary, windows_[size_t(su)], windows_[size_t(cu)], tier_names_);
    Decision d{r.name, "hold", v.reasons};
    if (v.kind == CanaryVerdict::kRollback) {
      d.decision = "rollback";
      for (size_t i = 0; i < r.weights.size(); ++i) r.weights[i] = int(i) == r.stable ? 1.0 : 0.0;
      r.canary_state = "rolled_back";
      log_locked(r, "canary_rollback", "canary", {{"version", r.canary.version}, {"reasons", v.reasons}, {"compared", v.compared}});
    } else if (v.kind == CanaryVerdict::kAdvance && now - r.step_since_ns >= window_ns) {
      if (size_t(r.step) + 1 < r.canary.steps.size()) {
        d.decision = "advance";
        set_step_locked(r, r.step + 1);
        log_locked(r, "canary_step", "canary", {{"version", r.canary.version}, {"percent", r.canary.steps[size_t(r.step)]},
                                                {"compared", v.compared}});
      } else {
        d.decision = "promote";
        for (size_t i = 0; i < r.weights.size(); ++i) r.weights[i] = int(i) == r.canary_i ? 1.0 : 0.0;
        r.stable = r.canary_i;
        r.canary_state = "promoted";
        log_locked(r, "canary_promoted", "canary", {{"version", r.canary.version}, {"compared", v.compared}});
      }
    } else if (r.last_decision != "hold") {
      if (v.kind == CanaryVerdict::kAdvance) d.reasons = {"the step has not lasted a window yet"};
      log_locked(r, "canary_hold", "canary", {{"version", r.canary.version}, {"reasons", d.reasons}});
    }
    r.last_decision = d.decision;
    out.push_back(std::move(d));
  }
  return out;
}

int Releases::unit_of(int model, const std::string& version) const {
  for (int u : rel_[size_t(model)].units)
    if (units_[size_t(u)].version == version) return u;
  return -1;
}

int Releases::find(const std::string& model) const {
  for (size_t i = 0; i < rel_.size(); ++i)
    if (rel_[i].name == model) return int(i);
  return -1;
}

int Releases::pick(int model, const std::string& sticky_id) {
  Release& r = rel_[size_t(model)];
  if (r.units.size() == 1) return r.units[0];
  std::lock_guard<std::mutex> lk(mu_);
  double sum = 0;
  for (double w : r.weights) sum += w;
  double u;
  if (!sticky_id.empty()) {
    u = unit_interval(r.name + '\0' + sticky_id);
  } else {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    u = double(rng_ >> 11) * 0x1.0p-53;
  }
  double at = u * sum;
  for (size_t i = 0; i < r.units.size(); ++i) {
    if (r.weights[i] <= 0) continue;
    if (at < r.weights[i]) return r.units[i];
    at -= r.weights[i];
  }
  for (size_t i = r.units.size(); i-- > 0;)  // rounding at the top end
    if (r.weights[i] > 0) return r.units[i];
  return r.units[0];
}

json Releases::state_locked(const Release& r) const {
  double sum = 0;
  for (double w : r.weights) sum += w;
  json versions = json::object();
  for (size_t i = 0; i < r.units.size(); ++i) {
    const int u = r.units[i];
    versions[units_[size_t(u)].version] = {{"weight", r.weights[i]},
                                           {"share", sum > 0 ? r.weights[i] / sum : 0.0},
                                           {"stable", int(i) == r.stable},
                                           {"workers", unit_workers_[size_t(u)]}};
  }
  return {{"model", r.name},
          {"versions", versions},
          {"stable", r.stable >= 0 ? json(units_[size_t(r.units[size_t(r.stable)])].version) : json(nullptr)},
          {"sticky", r.sticky == Sticky::kKey ? "key" : r.sticky == Sticky::kConversation ? "conversation" : "none"},
          {"canary", r.canary_i < 0 ? json(nullptr)
                                    : json{{"version", r.canary.version},
                                           {"state", r.canary_state},
                                           {"step_percent", r.step >= 0 ? json(r.canary.steps[size_t(r.step)]) : json(nullptr)},
                                           {"last_decision", r.last_decision}}}};
}

void Releases::log_locked(Release& r, const std::string& kind, const std::string& by, json detail) {
  json e = {{"at_ms", unix_ms()}, {"event", kind}, {"by", by}};
  for (auto& [k, v] : detail.items()) e[k] = v;
  double sum = 0;
  for (double w : r.weights) sum += w;
  json split = json::object();
  for (size_t i = 0; i < r.units.size(); ++i) split[units_[size_t(r.units[i])].version] = sum > 0 ? r.weights[i] / sum : 0.0;
  e["split"] = split;
  r.events.push_back(std::move(e));
  while (r.events.size() > kMaxEvents) r.events.pop_front();
}

Releases::Error Releases::state(const std::string& model, json* out) const {
  const int m = find(model);
  if (m < 0) return {404, "model_not_found", "no model '" + model + "'"};
  std::lock_guard<std::mutex> lk(mu_);
  *out = state_locked(rel_[size_t(m)]);
  return {};
}

Releases::Error Releases::set_weights(const std::string& model, const json& body, const std::string& by, json* out) {
  const int m = find(model);
  if (m < 0) return {404, "model_not_found", "no model '" + model + "'"};
  if (!body.is_object() || !body.contains("weights") || !body["weights"].is_object())
    return {400, "invalid_request", "the body must be {\"weights\": {\"VERSION\": WEIGHT, ...}}"};
  Release& r = rel_[size_t(m)];
  std::lock_guard<std::mutex> lk(mu_);
  std::map<std::string, double> next;
  std::set<std::string> versions;
  for (size_t i = 0; i < r.units.size(); ++i) {
    next[units_[size_t(r.units[i])].version] = r.weights[i];
    versions.insert(units_[size_t(r.units[i])].version);
  }
  for (const auto& [v, w] : body["weights"].items()) {
    if (!versions.count(v)) return {400, "unknown_version", "model '" + model + "' has no version '" + v + "'"};
    if (!w.is_number()) return {400, "invalid_weight", "the weight of '" + v + "' must be a number"};
    next[v] = w.get<double>();
  }
  if (std::string e = check_weights(next, versions); !e.empty()) return {400, "invalid_weight", e};
  for (size_t i = 0; i < r.units.size(); ++i) r.weights[i] = next[units_[size_t(r.units[i])].version];
  stop_canary_locked(r, by);
  log_locked(r, "weights", by, json::object());
  *out = state_locked(r);
  return {};
}

Releases::Error Releases::rollback(const std::string& model, const std::string& by, json* out) {
  const int m = find(model);
  if (m < 0) return {404, "model_not_found", "no model '" + model + "'"};
  Release& r = rel_[size_t(m)];
  std::lock_guard<std::mutex> lk(mu_);
  if (r.stable < 0) return {409, "no_stable_version", "model '" + model + "' has no stable version to roll back to (models." + model + ".stable)"};
  for (size_t i = 0; i < r.weights.size(); ++i) r.weights[i] = int(i) == r.stable ? 1.0 : 0.0;
  if (r.canary_state == "ramping") r.canary_state = "rolled_back";
  log_locked(r, "rollback", by, {{"to", units_[size_t(r.units[size_t(r.stable)])].version}});
  *out = state_locked(r);
  return {};
}

Releases::Error Releases::set_stable(const std::string& model, const json& body, const std::string& by, json* out) {
  const int m = find(model);
  if (m < 0) return {404, "model_not_found", "no model '" + model + "'"};
  if (!body.is_object() || !body.contains("version") || !body["version"].is_string())
    return {400, "invalid_request", "the body must be {\"version\": \"VERSION\"}"};
  Release& r = rel_[size_t(m)];
  const std::string v = body["version"].get<std::string>();
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < r.units.size(); ++i)
    if (units_[size_t(r.units[i])].version == v) {
      r.stable = int(i);
      log_locked(r, "stable", by, {{"version", v}});
      *out = state_locked(r);
      return {};
    }
  return {400, "unknown_version", "model '" + model + "' has no version '" + v + "'"};
}

Releases::Error Releases::events(const std::string& model, json* out) const {
  const int m = find(model);
  if (m < 0) return {404, "model_not_found", "no model '" + model + "'"};
  std::lock_guard<std::mutex> lk(mu_);
  json list = json::array();
  for (const json& e : rel_[size_t(m)].events) list.push_back(e);
  *out = {{"model", model}, {"events", std::move(list)}};
  return {};
}

}  // namespace ts::gateway
