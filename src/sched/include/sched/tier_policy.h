// A tier as a policy object: its shares in units of a given capacity, its queue, and what
// happens when its max wait is reached. The scheduler's loop asks these objects and never
// tests a tier's name or position itself (tiers are policy objects: docs/architecture.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sched/config.h"
#include "sched/queue_policy.h"
#include "sched/request.h"

namespace ts::sched {

// Where a request goes when its tier's wait limit acts on it.
struct Move {
  enum Kind : uint8_t {
    kStay,        // keep waiting where it is
    kHeadOfLine,  // same tier, ahead of the line and exempt from the tier's cap
    kToTier,      // re-queued on `tier` (at its head when promoted)
    kReject,
  };
  Kind kind = kStay;
  TierId tier = 0;
};

// The on_timeout rule of a tier.
class TimeoutRule {
 public:
  virtual ~TimeoutRule() = default;
  // The request waited max_queue_wait_ms without being started.
  virtual Move at_timeout(TierId self) const = 0;
  // At arrival, the predicted wait is above max_queue_wait_ms already.
  virtual Move at_admission(TierId self) const = 0;
  virtual EventKind event() const = 0;  // kPromoted, kDowngraded or kRejected
};

// Top tier: head of its line; others: to the head of the next tier up. At arrival the
// request is admitted: promotion will rescue it.
class PromoteRule final : public TimeoutRule {
 public:
  Move at_timeout(TierId self) const override {
    return self == 0 ? Move{Move::kHeadOfLine, 0} : Move{Move::kToTier, self - 1};
  }
  Move at_admission(TierId) const override { return {Move::kStay, 0}; }
  EventKind event() const override { return EventKind::kPromoted; }
};

class DowngradeRule final : public TimeoutRule {
 public:
  explicit DowngradeRule(TierId target) : target_(target) {}
  Move at_timeout(TierId) const override { return {Move::kToTier, target_}; }
  Move at_admission(TierId) const override { return {Move::kToTier, target_}; }
  EventKind event() const override { return EventKind::kDowngraded; }

 private:
  TierId target_;
};

class RejectRule final : public TimeoutRule {
 public:
  Move at_timeout(TierId) const override { return {Move::kReject, 0}; }
  Move at_admission(TierId) const override { return {Move::kReject, 0}; }
  EventKind event() const override { return EventKind::kRejected; }
};

// The entitlement rule, applied at arrival before the scheduler sees the request: a key
// entitled to some tiers only (`allowed`, empty: all) asking for another one is rejected
// when `reject`, else served on the highest allowed tier at or below the requested one,
// failing that on the key's default tier (`key_default`, -1: none), failing that on its
// best allowed tier. Tiers are ranks (0 = highest). The reason is Reason::kNotEntitled.
Move entitlement_move(TierId requested, const std::vector<TierId>& allowed, TierId key_default, bool reject);

class TierPolicy {
 public:
  // `id` is the tier's rank in priority order; the targets are the ranks of the on_timeout
  // and on_predicted_wait downgrade targets (-1: none).
  TierPolicy(const TierConfig& cfg, TierId id, TierId downgrade_target, TierId predicted_wait_target);

  const TierConfig& config() const { return cfg_; }
  const std::string& name() const { return cfg_.name; }
  TierId id() const { return id_; }

  // Floor and cap in units of `capacity` (tokens of a step, or KV blocks).
  int64_t floor_of(int64_t capacity) const;
  int64_t cap_of(int64_t capacity) const;
  bool borrows() const { return cfg_.borrow; }
  // 0: the tier never times out.
  int64_t max_wait_ns() const { return cfg_.max_queue_wait_ms * 1'000'000; }
  const TimeoutRule& timeout_rule() const { return *rule_; }
  // Where a request goes at arrival when its predicted wait exceeds max_queue_wait_ms.
  Move at_predicted_wait() const;
  std::unique_ptr<QueuePolicy> make_queue() const { return make_queue_policy(cfg_.queue); }

  // Would one more request of n_prompt tokens overflow this tier's queue?
  bool queue_full(int64_t n_queued, int64_t n_queued_tokens, int64_t n_prompt) const {
    return n_queued + 1 > cfg_.max_queued_requests || n_queued_tokens + n_prompt > cfg_.max_queued_tokens;
  }

 private:
  TierConfig cfg_;
  TierId id_;
  TierId predicted_wait_target_;
  std::unique_ptr<TimeoutRule> rule_;
};

// Policies of a validated config, in priority order (TierId order).
std::vector<TierPolicy> make_tier_policies(const SchedConfig& cfg);

}  // namespace ts::sched
