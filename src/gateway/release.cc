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

Releases::Releases(const GatewayConfig& cfg, const std::vector<std::string>& models) : models_(models) {
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
    for (size_t i = 0; i < r.units.size(); ++i) {
      const std::string& v = units_[size_t(r.units[i])].version;
      if (auto w = it->second.weights.find(v); w != it->second.weights.end()) r.weights[i] = w->second;
      if (v == it->second.stable) r.stable = int(i);
    }
  }
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
          {"sticky", r.sticky == Sticky::kKey ? "key" : r.sticky == Sticky::kConversation ? "conversation" : "none"}};
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
