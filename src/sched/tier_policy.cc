#include "sched/tier_policy.h"

#include <algorithm>

#include "core/check.h"
#include "sched/shares.h"

namespace ts::sched {

TierPolicy::TierPolicy(const TierConfig& cfg, TierId id, TierId downgrade_target, TierId predicted_wait_target)
    : cfg_(cfg), id_(id), predicted_wait_target_(predicted_wait_target) {
  switch (cfg.on_timeout.action) {
    case TimeoutAction::kPromote: rule_ = std::make_unique<PromoteRule>(); break;
    case TimeoutAction::kDowngrade: rule_ = std::make_unique<DowngradeRule>(downgrade_target); break;
    case TimeoutAction::kReject: rule_ = std::make_unique<RejectRule>(); break;
  }
  TS_CHECK(rule_ != nullptr);
}

Move TierPolicy::at_predicted_wait() const {
  switch (cfg_.on_predicted_wait.action) {
    case PredictedWaitAction::kFollowTimeout: return rule_->at_admission(id_);
    case PredictedWaitAction::kAdmit: return {Move::kStay, 0};
    case PredictedWaitAction::kReject: return {Move::kReject, 0};
    case PredictedWaitAction::kDowngrade: return {Move::kToTier, predicted_wait_target_};
  }
  return {Move::kReject, 0};
}

int64_t TierPolicy::floor_of(int64_t capacity) const { return share_units(cfg_.share_min, capacity); }

int64_t TierPolicy::cap_of(int64_t capacity) const {
  return std::max(floor_of(capacity), share_units(cfg_.share_max, capacity));
}

std::vector<TierPolicy> make_tier_policies(const SchedConfig& cfg) {
  std::vector<const TierConfig*> order;
  for (const TierConfig& t : cfg.tiers) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->priority < b->priority; });
  auto rank = [&](const std::string& name) {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i]->name == name) return TierId(i);
    return TierId(-1);
  };
  std::vector<TierPolicy> out;
  out.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const TierConfig& t = *order[i];
    const TierId target = t.on_timeout.action == TimeoutAction::kDowngrade ? rank(t.on_timeout.target) : -1;
    const TierId pw_target =
        t.on_predicted_wait.action == PredictedWaitAction::kDowngrade ? rank(t.on_predicted_wait.target) : -1;
    out.emplace_back(t, TierId(i), target, pw_target);
  }
  return out;
}

Move entitlement_move(TierId requested, const std::vector<TierId>& allowed, TierId key_default, bool reject) {
  if (allowed.empty() || std::find(allowed.begin(), allowed.end(), requested) != allowed.end())
    return {Move::kStay, requested};
  if (reject) return {Move::kReject, requested};
  TierId below = -1, best = -1;
  for (TierId t : allowed) {
    if (t >= requested && (below < 0 || t < below)) below = t;
    if (best < 0 || t < best) best = t;
  }
  return {Move::kToTier, below >= 0 ? below : key_default >= 0 ? key_default : best};
}

}  // namespace ts::sched
