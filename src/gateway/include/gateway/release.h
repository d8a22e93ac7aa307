// Model versions and how traffic splits between them (docs/gateway.md: releases). A served
// model's workers carry a `version`; each (model, version) is one unit the fleet queues
// and places for (the fleet's "model"). A request for a model is given one of its versions
// by the live weights (sticky per key or conversation where configured); an operator
// changes the weights or rolls back to the stable version at once; every change is an
// event. No sockets here: the gateway calls it, tests drive it directly.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "gateway/canary.h"
#include "gateway/config.h"

namespace ts::gateway {

class Releases {
 public:
  struct Unit {
    int model = 0;        // index into the served model names
    std::string version;  // "" for a model without versions
  };
  // An operation's failure: the HTTP status and the error code the admin API answers.
  struct Error {
    int status = 0;  // 0: none
    std::string code, message;
    explicit operator bool() const { return status != 0; }
  };

  // `models`: the served model names (workers' `model`s, first appearance first). A
  // configured canary starts at its first step.
  Releases(const GatewayConfig& cfg, const std::vector<std::string>& models, const Clock& clock);

  const std::vector<Unit>& units() const { return units_; }
  int unit_of_worker(int worker) const { return worker_unit_[size_t(worker)]; }
  int unit_of(int model, const std::string& version) const;  // -1: no such version
  // The unit for a request to model `model`: by `sticky_id` (a stable hash of it picks the
  // same version while the weights stay) when not empty, else at random.
  int pick(int model, const std::string& sticky_id);
  Sticky sticky(int model) const { return rel_[size_t(model)].sticky; }
  bool versioned(int model) const { return rel_[size_t(model)].units.size() > 1 || !units_[size_t(rel_[size_t(model)].units[0])].version.empty(); }

  // The admin API, by model name: the state ({versions: {v: {weight, stable, workers}}, ...}),
  // a new split (every weight given is set, versions left out keep theirs), a rollback (all
  // traffic to the stable version), the stable version named, and the event log.
  Error state(const std::string& model, nlohmann::json* out) const;
  Error set_weights(const std::string& model, const nlohmann::json& body, const std::string& by, nlohmann::json* out);
  Error rollback(const std::string& model, const std::string& by, nlohmann::json* out);
  Error set_stable(const std::string& model, const nlohmann::json& body, const std::string& by, nlohmann::json* out);
  Error events(const std::string& model, nlohmann::json* out) const;

  // The unit a request for `model` served by `unit` is mirrored to, or -1: its shadow
  // version, drawn at the configured fraction, never the unit itself.
  int shadow_for(int model, int unit);
  // A request a unit served, for its model's canary (ignored without one).
  void record(int unit, const ReleaseSample& s);
  // The canaries' decisions due now (every interval_ms): advance a step, promote, hold or
  // roll back, each an event; what was decided, for the caller's metric and log.
  struct Decision {
    std::string model, decision;  // advance, promote, hold, rollback
    std::vector<std::string> reasons;
  };
  std::vector<Decision> tick();

  static constexpr size_t kMaxEvents = 1000;

 private:
  struct Release {
    std::string name;
    std::vector<int> units;        // this model's units, by version name
    std::vector<double> weights;   // GUARDED_BY(mu_), per unit
    int stable = -1;               // GUARDED_BY(mu_): index into units, -1 none
    Sticky sticky = Sticky::kNone;
    std::deque<nlohmann::json> events;  // GUARDED_BY(mu_), the newest last
    // The canary (canary_i >= 0): GUARDED_BY(mu_).
    CanaryConfig canary;
    int shadow_unit = -1;
    double shadow_fraction = 0;
    int canary_i = -1;               // index into units
    std::string canary_state = "off";  // ramping, promoted, rolled_back, stopped (an operator's change)
    int step = -1;
    int64_t step_since_ns = 0, next_ns = 0;
    std::string last_decision;
  };
  void set_step_locked(Release& r, int step);
  void stop_canary_locked(Release& r, const std::string& why);
  int find(const std::string& model) const;
  nlohmann::json state_locked(const Release& r) const;
  void log_locked(Release& r, const std::string& kind, const std::string& by, nlohmann::json detail);

  std::vector<std::string> models_;
  std::vector<Unit> units_;
  std::vector<int> worker_unit_;
  std::vector<std::vector<std::string>> unit_workers_;
  std::vector<Release> rel_;  // per model
  const Clock& clock_;
  std::vector<std::string> tier_names_;
  std::vector<ReleaseWindow> windows_;  // GUARDED_BY(mu_), per unit
  mutable std::mutex mu_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ULL;  // GUARDED_BY(mu_)
};

}  // namespace ts::gateway
