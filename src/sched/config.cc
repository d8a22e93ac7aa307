#include "sched/config.h"

#include <cmath>
#include <map>
#include <set>

#include "sched/shares.h"

namespace ts::sched {

Result<OnTimeout> parse_on_timeout(std::string_view s) {
  OnTimeout t;
  constexpr std::string_view kDown = "downgrade:";
  if (s == "promote") {
    t.action = TimeoutAction::kPromote;
  } else if (s == "reject") {
    t.action = TimeoutAction::kReject;
  } else if (s.substr(0, kDown.size()) == kDown && s.size() > kDown.size()) {
    t.action = TimeoutAction::kDowngrade;
    t.target = std::string(s.substr(kDown.size()));
  } else {
    return invalid_argument("on_timeout '" + std::string(s) + "': expected promote, reject or downgrade:<tier>");
  }
  return t;
}

std::string to_string(const OnTimeout& t) {
  switch (t.action) {
    case TimeoutAction::kPromote: return "promote";
    case TimeoutAction::kReject: return "reject";
    case TimeoutAction::kDowngrade: return "downgrade:" + t.target;
  }
  return "?";
}

Result<OnPredictedWait> parse_on_predicted_wait(std::string_view s) {
  OnPredictedWait t;
  constexpr std::string_view kDown = "downgrade:";
  if (s == "admit") {
    t.action = PredictedWaitAction::kAdmit;
  } else if (s == "reject") {
    t.action = PredictedWaitAction::kReject;
  } else if (s.substr(0, kDown.size()) == kDown && s.size() > kDown.size()) {
    t.action = PredictedWaitAction::kDowngrade;
    t.target = std::string(s.substr(kDown.size()));
  } else {
    return invalid_argument("on_predicted_wait '" + std::string(s) + "': expected admit, reject or downgrade:<tier>");
  }
  return t;
}

std::string to_string(const OnPredictedWait& t) {
  switch (t.action) {
    case PredictedWaitAction::kFollowTimeout: return "";
    case PredictedWaitAction::kAdmit: return "admit";
    case PredictedWaitAction::kReject: return "reject";
    case PredictedWaitAction::kDowngrade: return "downgrade:" + t.target;
  }
  return "?";
}

Result<QueueKind> parse_queue_kind(std::string_view s) {
  if (s == "fcfs") return QueueKind::kFcfs;
  if (s == "shortest_prompt_first") return QueueKind::kShortestPromptFirst;
  return invalid_argument("queue '" + std::string(s) + "': expected fcfs or shortest_prompt_first");
}

SchedConfig default_config() {
  SchedConfig c;
  TierConfig fast;
  fast.name = "ultrafast";
  fast.priority = 0;
  fast.share_max = 0.3;
  fast.borrow = true;
  fast.max_queue_wait_ms = 200;
  fast.on_timeout = {TimeoutAction::kPromote, ""};
  fast.on_predicted_wait = {PredictedWaitAction::kDowngrade, "standard"};
  fast.speculative = true;
  fast.burst_tokens = 512;
  fast.interrupt = true;
  TierConfig standard;
  standard.name = "standard";
  standard.priority = 1;
  standard.share_min = 0.5;
  standard.max_queue_wait_ms = 5000;
  standard.on_timeout = {TimeoutAction::kReject, ""};
  standard.max_batch = 16;  // bounds the decode part of a step (and so the fast tier's wait)
  TierConfig batch;
  batch.name = "batch";
  batch.priority = 2;
  batch.share_min = 0.05;
  batch.max_queue_wait_ms = 10 * 60 * 1000;
  batch.on_timeout = {TimeoutAction::kReject, ""};
  batch.max_queued_requests = 16384;
  batch.max_batch = 16;
  c.tiers = {fast, standard, batch};
  return c;
}

const char* config_error_name(ConfigErrorCode c) {
  switch (c) {
    case ConfigErrorCode::kNoTiers: return "no_tiers";
    case ConfigErrorCode::kEmptyName: return "empty_name";
    case ConfigErrorCode::kDuplicateName: return "duplicate_name";
    case ConfigErrorCode::kDuplicatePriority: return "duplicate_priority";
    case ConfigErrorCode::kShareOutOfRange: return "share_out_of_range";
    case ConfigErrorCode::kShareMinAboveMax: return "share_min_above_max";
    case ConfigErrorCode::kShareMinSumAboveOne: return "share_min_sum_above_one";
    case ConfigErrorCode::kUnknownDowngradeTarget: return "unknown_downgrade_target";
    case ConfigErrorCode::kDowngradeNotLower: return "downgrade_not_lower";
    case ConfigErrorCode::kDowngradeCycle: return "downgrade_cycle";
    case ConfigErrorCode::kBadLimit: return "bad_limit";
    case ConfigErrorCode::kCapBelowOneToken: return "cap_below_one_token";
  }
  return "?";
}

Status ConfigError::to_status() const {
  std::string m = std::string(config_error_name(code)) + ": ";
  if (!tier.empty()) m += "tier '" + tier + "': ";
  return invalid_argument(m + message);
}

namespace {

bool in_unit(double x) { return std::isfinite(x) && x >= 0.0 && x <= 1.0; }

ConfigError err(ConfigErrorCode c, const std::string& tier, std::string msg) { return {c, tier, std::move(msg)}; }

}  // namespace

std::optional<ConfigError> check_config(const SchedConfig& cfg) {
  using C = ConfigErrorCode;
  if (cfg.tiers.empty()) return err(C::kNoTiers, "", "at least one tier is needed");
  if (cfg.step_token_budget < 0) return err(C::kBadLimit, "", "step_token_budget must be >= 1 (0: derived)");
  if (!(cfg.max_segment_ms > 0) || !std::isfinite(cfg.max_segment_ms))
    return err(C::kBadLimit, "", "max_segment_ms must be > 0");
  if (cfg.max_chunk_tokens < 0) return err(C::kBadLimit, "", "max_chunk_tokens must be >= 0");
  if (cfg.kv_blocks_total < 1 || cfg.kv_block_size < 1) return err(C::kBadLimit, "", "KV blocks and block size must be >= 1");
  if (cfg.max_queued_requests_total < 0 || cfg.max_queued_tokens_total < 0)
    return err(C::kBadLimit, "", "global queue limits must be >= 0");
  if (cfg.service_rate_window_ms < 1) return err(C::kBadLimit, "", "service_rate_window_ms must be >= 1");
  if (cfg.kv_reserve_tokens < 0) return err(C::kBadLimit, "", "kv_reserve_tokens must be >= 0");
  if (cfg.share_window_steps < 1) return err(C::kBadLimit, "", "share_window_steps must be >= 1");

  std::map<std::string, const TierConfig*> by_name;
  std::set<int32_t> priorities;
  double sum_min = 0.0;
  for (const TierConfig& t : cfg.tiers) {
    if (t.name.empty()) return err(C::kEmptyName, "", "a tier has no name");
    if (!by_name.emplace(t.name, &t).second) return err(C::kDuplicateName, t.name, "name used twice");
    if (!priorities.insert(t.priority).second)
      return err(C::kDuplicatePriority, t.name, "priority " + std::to_string(t.priority) + " used twice");
    if (!in_unit(t.share_min) || !in_unit(t.share_max))
      return err(C::kShareOutOfRange, t.name, "share_min and share_max must be in [0, 1]");
    if (t.share_min > t.share_max) return err(C::kShareMinAboveMax, t.name, "share_min > share_max");
    if (t.max_queue_wait_ms < 0 || t.max_queued_requests < 0 || t.max_queued_tokens < 0 || t.max_batch < 1 ||
        t.preemption_budget < 0 || t.burst_tokens < -1)
      return err(C::kBadLimit, t.name,
                 "queue limits and budgets must be >= 0, burst_tokens >= 0 (-1: derived), max_batch >= 1");
    // A tier that does not borrow never gets more than its cap, even alone: a cap that
    // rounds to 0 tokens of the step budget would leave its requests waiting forever.
    if (!t.borrow && cfg.step_token_budget > 0 && share_units(std::max(t.share_min, t.share_max), cfg.step_token_budget) < 1)
      return err(C::kCapBelowOneToken, t.name,
                 "share_max x step_token_budget (" + std::to_string(t.share_max) + " x " +
                     std::to_string(cfg.step_token_budget) +
                     ") is less than one token and the tier does not borrow: it could never run (raise share_max or "
                     "step_token_budget, or set borrow)");
    sum_min += t.share_min;
  }
  if (sum_min > 1.0 + 1e-9) return err(C::kShareMinSumAboveOne, "", "the share_min of all tiers add up to more than 1");

  // Downgrade edges: a target must exist, the graph must have no cycle, and every edge
  // must go down (which alone excludes cycles; the cycle check names the clearer error).
  for (const TierConfig& t : cfg.tiers) {
    if (t.on_timeout.action != TimeoutAction::kDowngrade) continue;
    if (!by_name.count(t.on_timeout.target))
      return err(C::kUnknownDowngradeTarget, t.name, "downgrade target '" + t.on_timeout.target + "' is not a tier");
  }
  for (const TierConfig& t : cfg.tiers) {
    std::set<std::string> seen{t.name};
    const TierConfig* cur = &t;
    while (cur->on_timeout.action == TimeoutAction::kDowngrade) {
      cur = by_name.at(cur->on_timeout.target);
      if (!seen.insert(cur->name).second)
        return err(C::kDowngradeCycle, t.name, "downgrade chain returns to '" + cur->name + "'");
    }
  }
  for (const TierConfig& t : cfg.tiers) {
    if (t.on_timeout.action != TimeoutAction::kDowngrade) continue;
    if (by_name.at(t.on_timeout.target)->priority <= t.priority)
      return err(C::kDowngradeNotLower, t.name, "downgrade target '" + t.on_timeout.target + "' is not a lower tier");
  }
  // on_predicted_wait downgrades go strictly down too (a request moves at most once per
  // tier at arrival, so this is all that keeps admission finite).
  for (const TierConfig& t : cfg.tiers) {
    if (t.on_predicted_wait.action != PredictedWaitAction::kDowngrade) continue;
    auto it = by_name.find(t.on_predicted_wait.target);
    if (it == by_name.end())
      return err(C::kUnknownDowngradeTarget, t.name,
                 "on_predicted_wait target '" + t.on_predicted_wait.target + "' is not a tier");
    if (it->second->priority <= t.priority)
      return err(C::kDowngradeNotLower, t.name,
                 "on_predicted_wait target '" + t.on_predicted_wait.target + "' is not a lower tier");
  }
  return std::nullopt;
}

}  // namespace ts::sched
