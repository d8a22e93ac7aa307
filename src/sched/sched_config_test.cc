// Config validation (one test per typed error), the share rule on its own, queue policies.
#include <gtest/gtest.h>

#include "sched/config.h"
#include "sched/scheduler.h"
#include "sched/queue_policy.h"
#include "sched/shares.h"
#include "sched/tier_policy.h"

namespace ts::sched {
namespace {

std::optional<ConfigErrorCode> code_of(const SchedConfig& c) {
  auto e = check_config(c);
  return e ? std::optional(e->code) : std::nullopt;
}

TEST(Config, DefaultIsValidAndMatchesTheIssue) {
  const SchedConfig c = default_config();
  EXPECT_TRUE(validate_config(c).is_ok());
  ASSERT_EQ(c.tiers.size(), 3u);
  EXPECT_EQ(c.tiers[0].name, "ultrafast");
  EXPECT_DOUBLE_EQ(c.tiers[0].share_max, 0.3);
  EXPECT_TRUE(c.tiers[0].borrow);
  EXPECT_EQ(c.tiers[0].max_queue_wait_ms, 200);
  EXPECT_EQ(c.tiers[0].on_timeout.action, TimeoutAction::kPromote);
  EXPECT_DOUBLE_EQ(c.tiers[1].share_min, 0.5);
  EXPECT_EQ(c.tiers[1].max_queue_wait_ms, 5000);
  EXPECT_EQ(c.tiers[1].on_timeout.action, TimeoutAction::kReject);
  EXPECT_DOUBLE_EQ(c.tiers[2].share_min, 0.05);
  EXPECT_EQ(c.tiers[2].max_queue_wait_ms, 600000);
}

TEST(Config, EveryErrorIsTyped) {
  using C = ConfigErrorCode;
  SchedConfig c;
  EXPECT_EQ(code_of(c), C::kNoTiers);

  c = default_config();
  c.tiers[1].name = "";
  EXPECT_EQ(code_of(c), C::kEmptyName);
  c = default_config();
  c.tiers[2].name = "standard";
  EXPECT_EQ(code_of(c), C::kDuplicateName);
  c = default_config();
  c.tiers[2].priority = 0;
  EXPECT_EQ(code_of(c), C::kDuplicatePriority);
  c = default_config();
  c.tiers[0].share_max = 1.5;
  EXPECT_EQ(code_of(c), C::kShareOutOfRange);
  c = default_config();
  c.tiers[1].share_min = -0.1;
  EXPECT_EQ(code_of(c), C::kShareOutOfRange);
  c = default_config();
  c.tiers[1].share_max = 0.4;
  EXPECT_EQ(code_of(c), C::kShareMinAboveMax);
  c = default_config();
  c.tiers[0].share_min = 0.3;
  c.tiers[2].share_min = 0.3;
  EXPECT_EQ(code_of(c), C::kShareMinSumAboveOne);
  c = default_config();
  c.tiers[1].on_timeout = {TimeoutAction::kDowngrade, "nope"};
  EXPECT_EQ(code_of(c), C::kUnknownDowngradeTarget);
  c = default_config();
  c.tiers[2].on_timeout = {TimeoutAction::kDowngrade, "standard"};
  EXPECT_EQ(code_of(c), C::kDowngradeNotLower);
  c = default_config();
  c.tiers[1].on_timeout = {TimeoutAction::kDowngrade, "batch"};
  c.tiers[2].on_timeout = {TimeoutAction::kDowngrade, "standard"};
  EXPECT_EQ(code_of(c), C::kDowngradeCycle);
  c = default_config();
  c.tiers[1].on_timeout = {TimeoutAction::kDowngrade, "batch"};
  EXPECT_EQ(code_of(c), std::nullopt);
  c = default_config();
  c.tiers[0].max_batch = 0;
  EXPECT_EQ(code_of(c), C::kBadLimit);
  c = default_config();
  c.step_token_budget = -1;
  EXPECT_EQ(code_of(c), C::kBadLimit);
  c.step_token_budget = 0;  // derived by the serving layer from the measured step cost
  EXPECT_EQ(code_of(c), std::nullopt);
  EXPECT_FALSE(Scheduler::create(c).is_ok());  // ... which must resolve it first
  c.max_segment_ms = 0;
  EXPECT_EQ(code_of(c), C::kBadLimit);
  c = default_config();
  c.tiers[0].on_predicted_wait = {PredictedWaitAction::kDowngrade, "nope"};
  EXPECT_EQ(code_of(c), C::kUnknownDowngradeTarget);
  c.tiers[0].on_predicted_wait = {PredictedWaitAction::kDowngrade, "ultrafast"};
  EXPECT_EQ(code_of(c), C::kDowngradeNotLower);
  c.tiers[0].on_predicted_wait = {PredictedWaitAction::kDowngrade, "batch"};
  EXPECT_EQ(code_of(c), std::nullopt);
  c = default_config();  // 0.01 x 64 < 1 token, no borrowing: could never run
  c.tiers[2].share_min = 0.0;
  c.tiers[2].share_max = 0.01;
  EXPECT_EQ(code_of(c), C::kCapBelowOneToken);
  c.tiers[2].borrow = true;  // borrowing idle capacity, it runs when the others are idle
  EXPECT_EQ(code_of(c), std::nullopt);
  c.tiers[2].borrow = false;
  c.step_token_budget = 100;  // 1 token per step
  EXPECT_EQ(code_of(c), std::nullopt);

  c = default_config();
  c.tiers[1].share_max = 0.4;
  const Status s = validate_config(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("share_min_above_max"), std::string::npos);
  EXPECT_NE(s.message().find("standard"), std::string::npos);
}

TEST(Config, ParseOnTimeout) {
  EXPECT_EQ(parse_on_timeout("promote")->action, TimeoutAction::kPromote);
  EXPECT_EQ(parse_on_timeout("reject")->action, TimeoutAction::kReject);
  auto d = parse_on_timeout("downgrade:batch");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->action, TimeoutAction::kDowngrade);
  EXPECT_EQ(d->target, "batch");
  EXPECT_EQ(to_string(*d), "downgrade:batch");
  EXPECT_FALSE(parse_on_timeout("downgrade:").is_ok());
  EXPECT_FALSE(parse_on_timeout("drop").is_ok());
  EXPECT_FALSE(parse_queue_kind("lifo").is_ok());
  EXPECT_EQ(parse_on_predicted_wait("admit")->action, PredictedWaitAction::kAdmit);
  EXPECT_EQ(parse_on_predicted_wait("reject")->action, PredictedWaitAction::kReject);
  auto p = parse_on_predicted_wait("downgrade:standard");
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->target, "standard");
  EXPECT_EQ(to_string(*p), "downgrade:standard");
  EXPECT_EQ(to_string(OnPredictedWait{}), "");
  EXPECT_FALSE(parse_on_predicted_wait("promote").is_ok());
  EXPECT_FALSE(parse_on_predicted_wait("downgrade:").is_ok());
}

TEST(Shares, FloorsFirstThenPriorityWithinCapsThenLend) {
  // ultrafast cap 30 borrow, standard floor 50, batch floor 5; budget 100.
  std::vector<ShareInput> in = {{1000, 0, 30, true}, {1000, 50, 100, false}, {1000, 5, 100, false}};
  EXPECT_EQ(allocate_shares(100, in), (std::vector<int64_t>{30, 65, 5}));
  // Standard idle: ultrafast is capped while batch has demand...
  in[1].demand = 0;
  EXPECT_EQ(allocate_shares(100, in), (std::vector<int64_t>{30, 0, 70}));
  // ...and borrows everything once it is alone.
  in[2].demand = 0;
  EXPECT_EQ(allocate_shares(100, in), (std::vector<int64_t>{100, 0, 0}));
  // Small demands are met in full; what is left is idle.
  in = {{10, 0, 30, true}, {20, 50, 100, false}, {3, 5, 100, false}};
  EXPECT_EQ(allocate_shares(100, in), (std::vector<int64_t>{10, 20, 3}));
  // A tier that does not borrow stops at its cap even when the rest is idle.
  in = {{1000, 0, 30, false}};
  EXPECT_EQ(allocate_shares(100, in), (std::vector<int64_t>{30}));
}

TEST(Shares, Rounding) {
  EXPECT_EQ(share_units(0.3, 10), 3);
  EXPECT_EQ(share_units(0.05, 512), 25);
  EXPECT_EQ(share_units(0.7, 10) + share_units(0.3, 10), 10);
  EXPECT_EQ(share_units(1.0, 7), 7);
}

TEST(QueuePolicy, HeadItemsFirstThenPolicyOrder) {
  auto fcfs = make_queue_policy(QueueKind::kFcfs);
  fcfs->push({1, 50, false});
  fcfs->push({2, 10, false});
  fcfs->push({3, 99, true});
  fcfs->push({4, 1, true});
  std::vector<RequestId> order;
  for (auto& i : fcfs->items()) order.push_back(i.id);
  EXPECT_EQ(order, (std::vector<RequestId>{3, 4, 1, 2}));
  EXPECT_TRUE(fcfs->remove(4));
  EXPECT_FALSE(fcfs->remove(4));

  auto spf = make_queue_policy(QueueKind::kShortestPromptFirst);
  EXPECT_STREQ(spf->name(), "shortest_prompt_first");
  spf->push({1, 50, false});
  spf->push({2, 10, false});
  spf->push({3, 10, false});
  spf->push({4, 70, true});
  order.clear();
  for (auto& i : spf->items()) order.push_back(i.id);
  EXPECT_EQ(order, (std::vector<RequestId>{4, 2, 3, 1}));
}

TEST(TierPolicy, TimeoutRulesAreObjects) {
  SchedConfig c = default_config();
  c.tiers[1].on_timeout = {TimeoutAction::kDowngrade, "batch"};
  auto p = make_tier_policies(c);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].timeout_rule().at_timeout(0).kind, Move::kHeadOfLine);
  EXPECT_EQ(p[0].timeout_rule().at_admission(0).kind, Move::kStay);
  EXPECT_EQ(p[1].timeout_rule().at_timeout(1).kind, Move::kToTier);
  EXPECT_EQ(p[1].timeout_rule().at_timeout(1).tier, 2);
  EXPECT_EQ(p[2].timeout_rule().at_timeout(2).kind, Move::kReject);
  // A promote rule below the top moves the request one tier up.
  PromoteRule pr;
  EXPECT_EQ(pr.at_timeout(2).kind, Move::kToTier);
  EXPECT_EQ(pr.at_timeout(2).tier, 1);
}

}  // namespace
}  // namespace ts::sched

namespace ts::sched {
namespace {

// The entitlement rule: tiers are ranks, 0 first.
TEST(EntitlementRule, StaysWhenAllowedOrUnrestricted) {
  EXPECT_EQ(entitlement_move(1, {}, -1, false).kind, Move::kStay);
  EXPECT_EQ(entitlement_move(1, {}, -1, true).kind, Move::kStay);
  EXPECT_EQ(entitlement_move(1, {0, 1}, -1, true).kind, Move::kStay);
}

TEST(EntitlementRule, RejectsWhenConfigured) {
  const Move m = entitlement_move(0, {1, 2}, 1, true);
  EXPECT_EQ(m.kind, Move::kReject);
}

TEST(EntitlementRule, DowngradesToTheBestAllowedTierBelow) {
  Move m = entitlement_move(0, {2, 1}, -1, false);
  EXPECT_EQ(m.kind, Move::kToTier);
  EXPECT_EQ(m.tier, 1);
  m = entitlement_move(1, {0, 2}, -1, false);  // 0 is above the request: not a downgrade target
  EXPECT_EQ(m.tier, 2);
}

TEST(EntitlementRule, NothingBelowFallsBackToTheDefaultThenTheBest) {
  Move m = entitlement_move(2, {1, 0}, 1, false);
  EXPECT_EQ(m.kind, Move::kToTier);
  EXPECT_EQ(m.tier, 1);  // the key's default tier
  m = entitlement_move(2, {1, 0}, -1, false);
  EXPECT_EQ(m.tier, 0);  // its best allowed tier
}

}  // namespace
}  // namespace ts::sched
