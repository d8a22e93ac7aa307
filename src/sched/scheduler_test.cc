// The tier rules, one behaviour per test, with hand-made step results (FakeEngine) and a
// ManualClock: floors, caps, borrowing, timeouts, admission, preemption, cancellation.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/clock.h"
#include "sched_test_util.h"

namespace ts::sched {
namespace {

using testing::FakeEngine;

constexpr int64_t kMs = 1'000'000;

std::unique_ptr<Scheduler> make(const SchedConfig& c) {
  auto s = Scheduler::create(c);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return std::move(s).value();
}

SchedConfig base(int64_t budget = 100, int32_t kv_blocks = 100000, int32_t block_size = 16) {
  SchedConfig c = default_config();
  c.step_token_budget = budget;
  c.kv_blocks_total = kv_blocks;
  c.kv_block_size = block_size;
  // The share rules on their own: no bursts (the Burst* tests turn them back on) and
  // batches large enough that max_batch never binds unless a test sets it.
  for (TierConfig& t : c.tiers) {
    t.burst_tokens = 0;
    t.interrupt = false;  // the Interrupt* tests turn it back on
    t.max_batch = 256;
  }
  return c;
}

Request req(RequestId id, TierId tier, int64_t prompt, int64_t max_out = 1000) {
  Request r;
  r.id = id;
  r.tier = tier;
  r.n_prompt_tokens = prompt;
  r.max_output_tokens = max_out;
  return r;
}

// Runs one step: schedule, fake engine, update. Returns the plan.
Plan run_step(Scheduler& s, FakeEngine& e, ManualClock& clock, int64_t dt_ns = 10 * kMs) {
  Plan p = s.schedule(clock.now_ns());
  StepUpdate u = e.step(p);
  EXPECT_TRUE(s.update(p, u).is_ok());
  e.sync(s);
  clock.advance_ns(dt_ns);
  return p;
}

// A 64-token budget with ultrafast bursting and interrupting (the defaults' latency tier).
SchedConfig interrupting() {
  SchedConfig c = base(64);
  c.tiers[0].burst_tokens = 512;
  c.tiers[0].interrupt = true;
  return c;
}

// The engine's answer to a plan it abandoned (Plan::interruptible): nothing changed.
StepUpdate interrupted(const Scheduler& s, const Plan& p) {
  StepUpdate u;
  for (const PlanEntry& en : p.entries) {
    RequestResult r;
    r.id = en.id;
    r.outcome = StepOutcome::kInterrupted;
    r.n_computed = s.info(en.id)->n_computed;
    r.n_blocks = s.info(en.id)->n_blocks;
    u.requests.push_back(r);
  }
  return u;
}

bool has_event(const Plan& p, EventKind k, RequestId id, Reason r) {
  for (const Event& e : p.events)
    if (e.kind == k && e.id == id && e.reason == r) return true;
  return false;
}

TEST(Scheduler, FloorHoldsUnderFloodOfHigherTier) {
  auto s = make(base());
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(s->submit(req(id++, 0, 400), 0).accepted);  // ultrafast flood
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(s->submit(req(id++, 1, 400), 0).accepted);  // standard flood
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->submit(req(id++, 2, 400), 0).accepted);
  for (int step = 0; step < 100; ++step) {
    const Plan p = run_step(*s, e, clock, 1 * kMs);  // 100 ms: nobody promoted yet
    EXPECT_EQ(p.n_tokens(), 100);                   // work-conserving
    EXPECT_EQ(p.tiers[0].tokens_planned, 30);       // capped (others have demand)
    EXPECT_GE(p.tiers[1].tokens_planned, 50);       // floor
    EXPECT_GE(p.tiers[2].tokens_planned, 5);        // floor
    EXPECT_EQ(p.n_priority_inversions, 0);
  }
  // Past 200 ms the waiting ultrafast requests are promoted: exempt from the cap, never
  // from the other tiers' floors.
  for (int step = 0; step < 200; ++step) {
    const Plan p = run_step(*s, e, clock, 1 * kMs);
    EXPECT_EQ(p.n_tokens(), 100);
    EXPECT_GE(p.tiers[1].tokens_planned, 50);
    EXPECT_GE(p.tiers[2].tokens_planned, 5);
  }
}

TEST(Scheduler, BatchFloorHoldsUnderStandardFlood) {
  auto s = make(base(200));
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(s->submit(req(id++, 1, 500), 0).accepted);
  ASSERT_TRUE(s->submit(req(id++, 2, 500), 0).accepted);
  for (int step = 0; step < 20; ++step) {
    const Plan p = run_step(*s, e, clock);
    EXPECT_GE(p.tiers[2].tokens_planned, 10);  // 0.05 x 200
    EXPECT_EQ(p.n_tokens(), 200);
  }
}

TEST(Scheduler, BorrowWhenIdleAndNoBorrowWithoutIt) {
  {
    auto s = make(base());
    FakeEngine e(100000, 16);
    ManualClock clock;
    for (RequestId id = 1; id <= 10; ++id) ASSERT_TRUE(s->submit(req(id, 0, 300), 0).accepted);
    const Plan p = run_step(*s, e, clock);
    EXPECT_EQ(p.tiers[0].tokens_planned, 100);  // alone: the whole budget despite share_max 0.3
  }
  {
    SchedConfig c = base();
    c.tiers[0].borrow = false;
    auto s = make(c);
    FakeEngine e(100000, 16);
    ManualClock clock;
    for (RequestId id = 1; id <= 10; ++id) ASSERT_TRUE(s->submit(req(id, 0, 300), 0).accepted);
    const Plan p = run_step(*s, e, clock);
    EXPECT_EQ(p.tiers[0].tokens_planned, 30);  // hard cap
  }
}

TEST(Scheduler, DecodesAndPromptChunksShareTheBudget) {
  auto s = make(base(64));
  FakeEngine e(100000, 16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 10), 0).accepted);
  Plan p = run_step(*s, e, clock);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].kind, EntryKind::kStart);
  EXPECT_EQ(p.entries[0].n_tokens, 10);
  EXPECT_EQ(p.entries[0].n_outputs, 1);
  ASSERT_TRUE(s->submit(req(2, 1, 200), 0).accepted);
  p = run_step(*s, e, clock);
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].id, 1u);  // the decode of the running request first
  EXPECT_EQ(p.entries[0].kind, EntryKind::kContinue);
  EXPECT_EQ(p.entries[0].n_tokens, 1);
  EXPECT_EQ(p.entries[1].n_tokens, 63);  // a chunk of the prompt fills the rest
  EXPECT_EQ(p.entries[1].n_outputs, 0);  // not the last chunk
}

TEST(Scheduler, FinishesAtMaxOutputTokensOrWhenReported) {
  auto s = make(base());
  FakeEngine e(100000, 16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 5, 3), 0).accepted);
  run_step(*s, e, clock);
  run_step(*s, e, clock);
  EXPECT_TRUE(s->info(1).has_value());
  run_step(*s, e, clock);
  EXPECT_FALSE(s->info(1).has_value());
  const Plan p = s->schedule(clock.now_ns());
  EXPECT_TRUE(has_event(p, EventKind::kFinished, 1, Reason::kNone));

  ASSERT_TRUE(s->submit(req(2, 1, 5, 100), 0).accepted);
  Plan q = s->schedule(clock.now_ns());
  StepUpdate u = e.step(q);
  u.requests[0].finished = true;  // a stop token
  ASSERT_TRUE(s->update(q, u).is_ok());
  EXPECT_FALSE(s->info(2).has_value());
}

// One request per step on tier 0, so a second one waits.
SchedConfig one_at_a_time(TimeoutAction a0, TimeoutAction a1 = TimeoutAction::kReject) {
  SchedConfig c = base();
  for (auto& t : c.tiers) t.max_batch = 1;
  c.tiers[0].on_timeout = {a0, ""};
  c.tiers[1].on_timeout = {a1, a1 == TimeoutAction::kDowngrade ? "batch" : ""};
  return c;
}

TEST(Scheduler, PromotionAtMaxWaitGoesToTheHeadAndPastTheCap) {
  SchedConfig c = base(100);
  c.max_chunk_tokens = 15;
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(s->submit(req(id++, 1, 1000), 0).accepted);
  ASSERT_TRUE(s->submit(req(100, 0, 1000), 0).accepted);
  ASSERT_TRUE(s->submit(req(101, 0, 1000), 0).accepted);
  ASSERT_TRUE(s->submit(req(102, 0, 10), 0).accepted);  // the cap is used by the first two
  Plan p = run_step(*s, e, clock, 100 * kMs);
  EXPECT_EQ(p.tiers[0].tokens_planned, 30);
  EXPECT_FALSE(s->info(102)->started);
  run_step(*s, e, clock, 100 * kMs);
  // 200 ms: promoted to the head of its line, exempt from the cap.
  p = run_step(*s, e, clock);
  EXPECT_TRUE(has_event(p, EventKind::kPromoted, 102, Reason::kQueueTimeout));
  EXPECT_TRUE(s->info(102)->promoted);
  ASSERT_FALSE(p.entries.empty());
  EXPECT_EQ(p.entries[0].id, 102u);  // before the tier's running requests
  EXPECT_EQ(p.entries[0].n_tokens, 10);
  EXPECT_GT(p.tiers[0].tokens_planned, 30);  // past the cap
  EXPECT_GE(p.tiers[1].tokens_planned, 50);  // the floor still holds
}

TEST(Scheduler, DowngradeAtMaxWait) {
  auto s = make(one_at_a_time(TimeoutAction::kPromote, TimeoutAction::kDowngrade));
  FakeEngine e(100000, 16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 10), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 1, 10), 0).accepted);
  run_step(*s, e, clock, 5000 * kMs);
  const Plan p = run_step(*s, e, clock);
  EXPECT_TRUE(has_event(p, EventKind::kDowngraded, 2, Reason::kQueueTimeout));
  EXPECT_EQ(s->info(2)->tier_requested, 1);
  EXPECT_EQ(s->info(2)->tier_served, 2);
  EXPECT_TRUE(s->info(2)->started);  // batch had room for it in the same step
}

TEST(Scheduler, RejectAtMaxWait) {
  auto s = make(one_at_a_time(TimeoutAction::kPromote));
  FakeEngine e(100000, 16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 10), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 1, 10), 0).accepted);
  run_step(*s, e, clock, 4999 * kMs);
  EXPECT_TRUE(s->info(2).has_value());
  run_step(*s, e, clock, 1 * kMs);
  const Plan p = run_step(*s, e, clock);
  EXPECT_TRUE(has_event(p, EventKind::kRejected, 2, Reason::kQueueTimeout));
  EXPECT_FALSE(s->info(2).has_value());
  EXPECT_EQ(s->queue_depth(1), 0);
}

// Standard tier, one request at a time, each taking ~1 s: a queue of 10 predicts ~10 s.
void build_backlog(Scheduler& s, FakeEngine& e, ManualClock& clock, RequestId& id) {
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(s.submit(req(id++, 1, 10, 100), clock.now_ns()).accepted);
  for (int i = 0; i < 400; ++i) run_step(s, e, clock);  // 4 s
  ASSERT_TRUE(s.predicted_wait_ns(1).has_value());
}

TEST(Scheduler, AdmissionRejectsFromPredictedWait) {
  SchedConfig c = base();
  c.tiers[1].max_batch = 1;
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  build_backlog(*s, e, clock, id);
  EXPECT_GT(*s->predicted_wait_ns(1), 5000 * kMs) << *s->predicted_wait_ns(1) / kMs;
  const Decision d = s->submit(req(id++, 1, 10, 100), clock.now_ns());
  EXPECT_FALSE(d.accepted);
  EXPECT_EQ(d.reason, Reason::kPredictedWait);
  EXPECT_STREQ(reason_name(d.reason), "predicted_wait");
  EXPECT_GT(d.retry_after_ms, 0);
  // The batch tier has no backlog: admitted.
  EXPECT_TRUE(s->submit(req(id++, 2, 10, 100), clock.now_ns()).accepted);
}

TEST(Scheduler, AdmissionDowngradesFromPredictedWait) {
  SchedConfig c = base();
  c.tiers[1].max_batch = 1;
  c.tiers[1].on_timeout = {TimeoutAction::kDowngrade, "batch"};
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  build_backlog(*s, e, clock, id);
  const Decision d = s->submit(req(id, 1, 10, 100), clock.now_ns());
  EXPECT_TRUE(d.accepted);
  EXPECT_EQ(d.tier_requested, 1);
  EXPECT_EQ(d.tier_served, 2);
  EXPECT_EQ(d.reason, Reason::kPredictedWait);
  EXPECT_EQ(s->info(id)->tier_served, 2);
}

TEST(Scheduler, BoundedQueuesAndInvalidRequests) {
  SchedConfig c = base();
  c.tiers[1].max_queued_requests = 2;
  c.tiers[2].max_queued_tokens = 100;
  c.kv_blocks_total = 10;
  auto s = make(c);
  EXPECT_TRUE(s->submit(req(1, 1, 10, 10), 0).accepted);
  EXPECT_TRUE(s->submit(req(2, 1, 10, 10), 0).accepted);
  Decision d = s->submit(req(3, 1, 10, 10), 0);
  EXPECT_FALSE(d.accepted);
  EXPECT_EQ(d.reason, Reason::kQueueFull);
  EXPECT_TRUE(s->submit(req(4, 2, 60, 10), 0).accepted);
  EXPECT_EQ(s->submit(req(5, 2, 60, 10), 0).reason, Reason::kQueueFull);
  EXPECT_EQ(s->submit(req(6, 2, 150, 20), 0).reason, Reason::kTooLarge);  // 170 tokens > 10 x 16
  EXPECT_EQ(s->submit(req(7, 9, 10, 10), 0).reason, Reason::kInvalidRequest);
  EXPECT_EQ(s->submit(req(1, 1, 10, 10), 0).reason, Reason::kInvalidRequest);  // id in use
  EXPECT_EQ(s->submit(req(8, 1, 0, 10), 0).reason, Reason::kInvalidRequest);
}

TEST(Scheduler, GlobalOverloadShedsTheLowestTierFirst) {
  SchedConfig c = base();
  c.max_queued_requests_total = 3;
  auto s = make(c);
  ASSERT_TRUE(s->submit(req(1, 2, 10), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 2, 10), 0).accepted);
  ASSERT_TRUE(s->submit(req(3, 1, 10), 0).accepted);
  // Full: a standard request sheds the newest batch request.
  const Decision d = s->submit(req(4, 1, 10), 0);
  EXPECT_TRUE(d.accepted);
  EXPECT_FALSE(s->info(2).has_value());
  EXPECT_TRUE(s->info(1).has_value());
  // A batch request has nobody lower to shed: 503-style rejection.
  const Decision b = s->submit(req(5, 2, 10), 0);
  EXPECT_FALSE(b.accepted);
  EXPECT_EQ(b.reason, Reason::kOverloaded);
  const Plan p = s->schedule(0);
  EXPECT_TRUE(has_event(p, EventKind::kRejected, 2, Reason::kShedForHigherTier));
}

// KV with block_size 1 (blocks == tokens), 20 blocks: low's floor is 4 blocks.
SchedConfig kv_config() {
  SchedConfig c = base(100, 20, 1);
  c.tiers[0].share_max = 1.0;
  c.tiers[1].share_min = 0.0;
  c.tiers[2].share_min = 0.2;
  return c;
}

TEST(Scheduler, PreemptionOrderLowestTierNewestFirstNeverBelowFloor) {
  auto s = make(kv_config());
  FakeEngine e(20, 1);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 2, 6, 12), 0).accepted);  // low, older
  ASSERT_TRUE(s->submit(req(2, 2, 6, 12), 0).accepted);  // low, newer
  ASSERT_TRUE(s->submit(req(3, 1, 6, 12), 0).accepted);  // mid
  run_step(*s, e, clock);
  EXPECT_EQ(s->kv_blocks(2), 12);
  EXPECT_EQ(s->kv_blocks(1), 6);
  ASSERT_TRUE(s->submit(req(10, 0, 10, 10), clock.now_ns()).accepted);
  const Plan p = run_step(*s, e, clock);
  // low's newest first, then mid; low's older request keeps low at its floor.
  EXPECT_EQ(p.preempt, (std::vector<RequestId>{2, 3})) << testing::describe(p);
  EXPECT_TRUE(has_event(p, EventKind::kPreempted, 2, Reason::kKvPressure));
  ASSERT_FALSE(p.entries.empty());
  EXPECT_EQ(p.entries[0].id, 10u);
  EXPECT_EQ(p.entries[0].n_tokens, 10);
  EXPECT_EQ(s->info(1)->state, RequestState::kRunning);
  EXPECT_EQ(s->info(2)->state, RequestState::kQueued);
  EXPECT_EQ(s->info(2)->n_preemptions, 1);
  EXPECT_GE(s->kv_blocks(2), 4);
  EXPECT_EQ(e.used(), s->kv_blocks(0) + s->kv_blocks(1) + s->kv_blocks(2));
}

TEST(Scheduler, PreemptionBudgetIsRespected) {
  auto s = make(kv_config());
  FakeEngine e(20, 1);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 2, 6, 12), 0).accepted);
  Request spent = req(2, 2, 6, 12);
  spent.preemption_budget = 0;  // never preempted
  ASSERT_TRUE(s->submit(spent, 0).accepted);
  ASSERT_TRUE(s->submit(req(3, 1, 6, 12), 0).accepted);
  run_step(*s, e, clock);
  ASSERT_TRUE(s->submit(req(10, 0, 10, 10), clock.now_ns()).accepted);
  const Plan p = run_step(*s, e, clock);
  EXPECT_EQ(p.preempt, (std::vector<RequestId>{1, 3}));  // the older one instead
  EXPECT_EQ(s->info(2)->state, RequestState::kRunning);
}

TEST(Scheduler, PreemptedRequestResumesByRecomputation) {
  auto s = make(kv_config());
  FakeEngine e(20, 1);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 2, 6, 12), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 2, 6, 12), 0).accepted);
  ASSERT_TRUE(s->submit(req(3, 1, 6, 12), 0).accepted);
  run_step(*s, e, clock);
  ASSERT_TRUE(s->submit(req(10, 0, 10, 10), clock.now_ns()).accepted);
  std::vector<RequestId> finished;
  int64_t resumed_from = -1;
  for (int i = 0; i < 200 && s->n_active() > 0; ++i) {
    const Plan p = run_step(*s, e, clock);
    for (const PlanEntry& en : p.entries)
      if (en.id == 2 && en.kind == EntryKind::kResume && resumed_from < 0) resumed_from = en.n_tokens;
    for (const Event& ev : p.events)
      if (ev.kind == EventKind::kFinished) finished.push_back(ev.id);
  }
  finished.push_back(0);
  for (const Event& ev : s->schedule(clock.now_ns()).events)
    if (ev.kind == EventKind::kFinished) finished.push_back(ev.id);
  // Recomputation starts from the prompt and the token generated before preemption.
  EXPECT_GT(resumed_from, 0);
  EXPECT_LE(resumed_from, 7);
  EXPECT_EQ(s->n_active(), 0);
  std::sort(finished.begin(), finished.end());
  EXPECT_EQ(finished, (std::vector<RequestId>{0, 1, 2, 3, 10}));
  EXPECT_EQ(e.used(), 0);
}

TEST(Scheduler, LowerTierBelowFloorTakesBackWhatWasLent) {
  auto s = make(kv_config());
  FakeEngine e(20, 1);
  ManualClock clock;
  // mid borrows the whole cache while low is idle.
  ASSERT_TRUE(s->submit(req(1, 1, 9, 11), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 1, 9, 11), 0).accepted);
  run_step(*s, e, clock);
  EXPECT_EQ(s->kv_blocks(1), 18);
  ASSERT_TRUE(s->submit(req(3, 2, 4, 10), clock.now_ns()).accepted);
  const Plan p = run_step(*s, e, clock);
  EXPECT_EQ(p.preempt, (std::vector<RequestId>{2}));
  EXPECT_EQ(s->info(3)->state, RequestState::kRunning);
  EXPECT_GE(s->kv_blocks(2), 4);
}

// A queued request starts only while the running ones keep room to grow (one block
// each by default): otherwise the start fills the cache, the next decode of the running
// request finds no block, and one of them is preempted to redo its work.
TEST(Scheduler, GrowthReserveKeepsRoomForRunningRequests) {
  auto s = make(base(100, 10, 4));  // 10 blocks of 4 cells
  FakeEngine e(10, 4);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 17, 8), 0).accepted);  // 5 blocks, room for 3 more tokens
  run_step(*s, e, clock);
  ASSERT_TRUE(s->submit(req(2, 1, 19, 4), clock.now_ns()).accepted);  // 5 blocks to start
  int n_preempted = 0;
  bool overlapped = false;
  for (int i = 0; i < 100 && s->n_active() > 0; ++i) {
    const Plan p = run_step(*s, e, clock);
    n_preempted += int(p.preempt.size());
    bool has1 = false, has2 = false;
    for (const PlanEntry& en : p.entries) {
      has1 |= en.id == 1;
      has2 |= en.id == 2;
    }
    overlapped |= has1 && has2;
  }
  EXPECT_EQ(s->n_active(), 0);
  EXPECT_EQ(n_preempted, 0);
  EXPECT_FALSE(overlapped);  // 2 waited for 1: both together never fit
  EXPECT_EQ(e.used(), 0);

  // kv_reserve_tokens sets the horizon; negative is refused.
  SchedConfig c = base();
  c.kv_reserve_tokens = -1;
  EXPECT_FALSE(Scheduler::create(c).is_ok());
}

// Running requests keep their batch slots: a promoted request waits for a free slot
// instead of taking one from a running request that holds KV and cannot finish without it.
TEST(Scheduler, RunningRequestsKeepTheirBatchSlots) {
  SchedConfig c = base();
  c.tiers[0].max_batch = 2;
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 0, 10, 50), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 0, 10, 50), 0).accepted);
  ASSERT_TRUE(s->submit(req(3, 0, 10, 5), 0).accepted);
  run_step(*s, e, clock, 300 * kMs);
  Plan p = run_step(*s, e, clock);
  EXPECT_TRUE(has_event(p, EventKind::kPromoted, 3, Reason::kQueueTimeout));
  std::vector<RequestId> ids;
  for (const PlanEntry& en : p.entries) ids.push_back(en.id);
  EXPECT_EQ(ids, (std::vector<RequestId>{1, 2}));
  for (int i = 0; i < 200 && s->n_active() > 0; ++i) run_step(*s, e, clock);
  EXPECT_EQ(s->n_active(), 0);
}

// A latency tier at a low rate runs its whole prompt in one step on top of the budget,
// while the flooding tier keeps its full budget: the fast request does not wait for
// chunks of 0.3 x budget, and the others' steps are not taken from them.
TEST(Scheduler, BurstRunsALowRatePromptInOneStepOnTopOfTheBudget) {
  SchedConfig c = base(64);
  c.tiers[0].burst_tokens = 512;
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  for (RequestId id = 1; id <= 20; ++id) ASSERT_TRUE(s->submit(req(id, 1, 500, 50), 0).accepted);
  for (int i = 0; i < 64; ++i) run_step(*s, e, clock);  // standard fills the window
  ASSERT_TRUE(s->submit(req(100, 0, 300, 8), clock.now_ns()).accepted);
  const Plan p = run_step(*s, e, clock);
  int64_t fast = 0;
  for (const PlanEntry& en : p.entries)
    if (en.id == 100) fast = en.n_tokens;
  EXPECT_EQ(fast, 300);                           // the whole prompt, not 0.3 x 64 = 19
  EXPECT_EQ(p.tiers[1].tokens_planned, 64 - 19);  // standard: the budget less ultrafast's cap
  EXPECT_EQ(p.n_tokens(), 300 + 64 - 19);

  // Off (burst_tokens 0): the prompt advances by the tier's capped share per step.
  c.tiers[0].burst_tokens = 0;
  auto s2 = make(c);
  FakeEngine e2(100000, 16);
  for (RequestId id = 1; id <= 20; ++id) ASSERT_TRUE(s2->submit(req(id, 1, 500, 50), 0).accepted);
  run_step(*s2, e2, clock);
  ASSERT_TRUE(s2->submit(req(100, 0, 300, 8), clock.now_ns()).accepted);
  const Plan p2 = run_step(*s2, e2, clock);
  EXPECT_LE(p2.n_tokens(), 64);
  for (const PlanEntry& en : p2.entries)
    if (en.id == 100) {
      EXPECT_LE(en.n_tokens, 19);
    }

  c.tiers[0].burst_tokens = -1;
  EXPECT_FALSE(Scheduler::create(c).is_ok());
  c = base(64);
  c.share_window_steps = 0;
  EXPECT_FALSE(Scheduler::create(c).is_ok());
}

// A flooding latency tier gets no more than share_max of all tokens over the window from
// its bursts: the cap holds on average, and the standard tier keeps its floor per step.
TEST(Scheduler, BurstKeepsTheWindowedCapUnderAFloodOfTheLatencyTier) {
  SchedConfig c = base(64);
  c.tiers[0].burst_tokens = 512;
  c.tiers[0].borrow = false;         // borrowing would lend it the idle rest anyway
  c.tiers[0].max_queue_wait_ms = 0;  // and promotion lifts the cap of requests that waited
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  int64_t fast = 0, all = 0;
  for (int i = 0; i < 400; ++i) {
    while (s->queue_depth(0) < 4) ASSERT_TRUE(s->submit(req(id++, 0, 200, 4), clock.now_ns()).accepted);
    while (s->queue_depth(1) < 4) ASSERT_TRUE(s->submit(req(id++, 1, 200, 4), clock.now_ns()).accepted);
    const Plan p = run_step(*s, e, clock);
    EXPECT_GE(p.tiers[1].tokens_planned, std::min(p.tiers[1].tokens_floor, p.tiers[1].tokens_demand));
    if (i >= 64) {  // after the first window
      fast += p.tiers[0].tokens_planned;
      all += p.n_tokens();
    }
  }
  ASSERT_GT(all, 0);
  EXPECT_LE(double(fast) / double(all), 0.3 + 0.02);
  EXPECT_GE(double(fast) / double(all), 0.25);  // and it does use its share
}

// An interrupting tier's new prompt takes a step of its own (the others sit it out), and
// that step cannot be interrupted; steps with only its decodes can.
TEST(Scheduler, InterruptTierPromptRunsInAnExclusiveStep) {
  SchedConfig c = interrupting();
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  for (RequestId id = 1; id <= 20; ++id) ASSERT_TRUE(s->submit(req(id, 1, 500, 50), 0).accepted);
  Plan p = run_step(*s, e, clock);
  EXPECT_FALSE(p.exclusive);
  EXPECT_TRUE(p.interruptible);  // standard work only, and ultrafast may take a step
  ASSERT_TRUE(s->submit(req(100, 0, 300, 8), clock.now_ns()).accepted);
  p = run_step(*s, e, clock);
  EXPECT_TRUE(p.exclusive);
  EXPECT_FALSE(p.interruptible);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].id, 100u);
  EXPECT_EQ(p.entries[0].n_tokens, 300);  // the whole prompt (burst)
  EXPECT_EQ(p.tiers[1].tokens_planned, 0);
  EXPECT_EQ(p.n_priority_inversions, 0);
  // Its decodes share steps with standard again, and those steps are interruptible.
  p = run_step(*s, e, clock);
  EXPECT_FALSE(p.exclusive);
  EXPECT_TRUE(p.interruptible);
  EXPECT_GT(p.tiers[1].tokens_planned, 0);
  bool fast_decode = false;
  for (const PlanEntry& en : p.entries) fast_decode |= en.id == 100 && en.n_tokens == 1;
  EXPECT_TRUE(fast_decode);

  // Off: the prompt shares its step with the other tiers' budget (the burst rule alone).
  c.tiers[0].interrupt = false;
  auto s2 = make(c);
  FakeEngine e2(100000, 16);
  for (RequestId id = 1; id <= 20; ++id) ASSERT_TRUE(s2->submit(req(id, 1, 500, 50), 0).accepted);
  p = run_step(*s2, e2, clock);
  EXPECT_FALSE(p.interruptible);
  ASSERT_TRUE(s2->submit(req(100, 0, 300, 8), clock.now_ns()).accepted);
  p = run_step(*s2, e2, clock);
  EXPECT_FALSE(p.exclusive);
  EXPECT_EQ(p.tiers[1].tokens_planned, 64 - 19);
}

// A flood of small prompts of an interrupting tier: exclusive steps stay within share_max
// of every window of steps, so the other tiers keep their floors over the window. Without
// a measured step cost floors are kept in tokens: over every window standard gets at
// least min(share_min x the step's tokens, its floor) per step (a short exclusive step
// owes it less than a full one).
TEST(Scheduler, InterruptTierExclusiveStepsKeepFloorsOverTheWindow) {
  SchedConfig c = interrupting();
  c.tiers[0].max_queue_wait_ms = 0;
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  std::vector<bool> excl;
  std::vector<int64_t> standard, owed;
  for (int i = 0; i < 400; ++i) {
    while (s->queue_depth(0) < 4) ASSERT_TRUE(s->submit(req(id++, 0, 8, 2), clock.now_ns()).accepted);
    while (s->queue_depth(1) < 4) ASSERT_TRUE(s->submit(req(id++, 1, 200, 4), clock.now_ns()).accepted);
    const Plan p = run_step(*s, e, clock);
    excl.push_back(p.exclusive);
    standard.push_back(p.tiers[1].tokens_planned);
    owed.push_back(std::min<int64_t>(p.n_tokens() / 2, 32));  // min(0.5 x step, floor 0.5 x 64)
    if (!p.exclusive) {
      EXPECT_GE(p.tiers[1].tokens_planned, p.tiers[1].tokens_floor);
    }
  }
  const int w = c.share_window_steps;
  int64_t n_excl = 0;
  for (int i = 0; i + w <= int(excl.size()); ++i) {
    int n = 0;
    int64_t std_tokens = 0, std_owed = 0;
    for (int j = i; j < i + w; ++j) {
      n += excl[size_t(j)];
      std_tokens += standard[size_t(j)];
      std_owed += owed[size_t(j)];
    }
    EXPECT_LE(n, 19) << "window at step " << i;  // 0.3 x 64
    EXPECT_GE(std_tokens, std_owed) << i;        // standard's floor, over the window
    if (i == 0) n_excl = n;
  }
  EXPECT_GT(n_excl, 0);  // and the fast tier does get exclusive steps
}

// An interrupted step changes nothing: the same work is planned again, and its tokens do
// not count against the interrupting tier's window.
TEST(Scheduler, InterruptedStepIsPlannedAgain) {
  SchedConfig c = interrupting();
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  for (RequestId id = 1; id <= 4; ++id) ASSERT_TRUE(s->submit(req(id, 1, 40, 50), 0).accepted);
  run_step(*s, e, clock);
  const Plan p = s->schedule(clock.now_ns());
  ASSERT_TRUE(p.interruptible);
  const StepUpdate u = interrupted(*s, p);
  std::vector<int64_t> before;
  for (RequestId id = 1; id <= 4; ++id) before.push_back(s->info(id)->n_computed);
  ASSERT_TRUE(s->update(p, u).is_ok());
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(s->info(id)->n_computed, before[size_t(id - 1)]);
  const Plan again = s->schedule(clock.now_ns());
  ASSERT_EQ(again.entries.size(), p.entries.size());
  for (size_t i = 0; i < p.entries.size(); ++i) {
    EXPECT_EQ(again.entries[i].id, p.entries[i].id);
    EXPECT_EQ(again.entries[i].n_tokens, p.entries[i].n_tokens);
  }
}

// A flood of an interrupting tier whose arrivals interrupt every interruptible step: the
// other tiers still get their floors over the window (interrupted steps compute nothing,
// so the scheduler must stop offering interruptible steps once the floors could not
// afford the exclusive step that would follow).
// Past its max wait a fast request gets the next step to itself, or it is told then: when
// the window refuses the step (its tier past its share, or here, with a share that would
// allow it, the standard floor over the window), its tier's on_predicted_wait downgrades
// it at once (reason queue_timeout). No step with standard work is planned between a
// promotion and the start of a request served on ultrafast, and standard is not starved.
TEST(Scheduler, PromotedFastRequestTakesTheNextStepOrIsToldThen) {
  SchedConfig c = interrupting();
  c.tiers[0].max_queue_wait_ms = 50;
  c.tiers[0].share_max = 0.9;  // its share allows exclusive steps; the standard floor does not
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(s->submit(req(id++, 1, 10, 100000), 0).accepted);
  for (int i = 0; i < 5; ++i) run_step(*s, e, clock);
  std::vector<RequestId> fast;
  int n_promoted = 0, n_told = 0, n_started = 0, n_standard_steps = 0;
  for (int step = 0; step < 300; ++step) {
    for (int k = 0; k < 3; ++k) {  // three 300-token prompts per 10 ms step: far over its share
      const Decision d = s->submit(req(id, 0, 300, 2), clock.now_ns());
      if (d.accepted && d.tier_served == 0) fast.push_back(id);
      ++id;
    }
    const Plan p = run_step(*s, e, clock);
    EXPECT_FALSE(p.exclusive_forced);
    n_standard_steps += p.tiers[1].tokens_planned > 0;
    for (const Event& ev : p.events) {
      n_promoted += ev.kind == EventKind::kPromoted;
      if (ev.kind == EventKind::kDowngraded && ev.from_tier == 0) {
        EXPECT_EQ(ev.reason, Reason::kQueueTimeout);
        EXPECT_EQ(ev.to_tier, 1);
        ++n_told;
      }
    }
    for (RequestId f : fast) {
      const auto info = s->info(f);
      if (!info || !info->started || info->tier_served != 0) continue;
      EXPECT_EQ(info->steps_behind_after_max_wait, 0) << "request " << f;
    }
    for (const PlanEntry& en : p.entries)
      if (en.tier == 0 && en.kind == EntryKind::kStart) ++n_started;
  }
  EXPECT_GT(n_promoted, 0);
  EXPECT_GT(n_told, 0);
  EXPECT_GT(n_started, 10);
  EXPECT_GT(n_standard_steps, 150) << "standard starved";
}

// The same with on_predicted_wait: reject — the promoted request that cannot have the
// step is refused then (and leaves this step's candidates cleanly).
TEST(Scheduler, PromotedFastRequestIsRefusedWhenItsRuleSaysSo) {
  SchedConfig c = interrupting();
  c.tiers[0].max_queue_wait_ms = 50;
  c.tiers[0].share_max = 0.9;
  c.tiers[0].on_predicted_wait = {PredictedWaitAction::kReject, ""};
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(s->submit(req(id++, 1, 10, 100000), 0).accepted);
  for (int i = 0; i < 5; ++i) run_step(*s, e, clock);
  int n_refused = 0, n_standard_steps = 0;
  for (int step = 0; step < 200; ++step) {
    for (int k = 0; k < 3; ++k) s->submit(req(id++, 0, 300, 2), clock.now_ns());
    const Plan p = run_step(*s, e, clock);
    n_standard_steps += p.tiers[1].tokens_planned > 0;
    for (const Event& ev : p.events)
      if (ev.kind == EventKind::kRejected && ev.from_tier == 0 && ev.reason == Reason::kQueueTimeout) ++n_refused;
  }
  EXPECT_GT(n_refused, 0);
  EXPECT_GT(n_standard_steps, 100);
}

TEST(Scheduler, InterruptFloodCannotStarveTheFloors) {
  SchedConfig c = interrupting();
  c.tiers[0].max_queue_wait_ms = 0;
  auto s = make(c);
  FakeEngine e(100000, 16);
  ManualClock clock;
  RequestId id = 1;
  int64_t standard = 0, floor_owed = 0;
  int n_interrupted = 0;
  for (int i = 0; i < 600; ++i) {
    while (s->queue_depth(1) < 4) ASSERT_TRUE(s->submit(req(id++, 1, 200, 4), clock.now_ns()).accepted);
    while (s->queue_depth(2) < 2) ASSERT_TRUE(s->submit(req(id++, 2, 200, 4), clock.now_ns()).accepted);
    const Plan p = s->schedule(clock.now_ns());
    // Adversarial arrivals: a fast request arrives during every interruptible step (and
    // during every other step too in the second half), so each such step is abandoned.
    const bool arrive = p.interruptible || i >= 300;
    if (arrive) {
      ASSERT_TRUE(s->submit(req(id++, 0, 8, 2), clock.now_ns()).accepted);
    }
    StepUpdate u;
    if (p.interruptible) {
      ++n_interrupted;
      u = interrupted(*s, p);
    } else {
      u = e.step(p);
      if (i >= 64) {
        standard += p.tiers[1].tokens_planned;
      }
    }
    if (i >= 64) floor_owed += std::min(p.tiers[1].tokens_floor, p.tiers[1].tokens_demand);
    ASSERT_TRUE(s->update(p, u).is_ok());
    e.sync(*s);
    clock.advance_ns(10 * kMs);
  }
  EXPECT_GT(n_interrupted, 0);
  EXPECT_GE(standard, floor_owed) << n_interrupted << " interrupted plans";
}

TEST(Scheduler, NoRoomFromTheEngineIsRetried) {
  auto s = make(base(100, 100, 16));
  FakeEngine e(4, 16);  // the engine has far fewer blocks than the config says
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 40, 5), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 1, 40, 5), 0).accepted);
  Plan p = run_step(*s, e, clock);
  EXPECT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(s->info(2)->state, RequestState::kQueued);  // kNoRoom: nothing changed
  EXPECT_EQ(s->kv_blocks_available(), 1);
  for (int i = 0; i < 40 && (s->info(1) || s->info(2)); ++i) run_step(*s, e, clock);
  EXPECT_EQ(s->n_active(), 0);
}

TEST(Scheduler, CancelQueuedAndRunning) {
  auto s = make(base());
  FakeEngine e(100000, 16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 10), 0).accepted);
  run_step(*s, e, clock);
  ASSERT_TRUE(s->submit(req(2, 1, 10), 0).accepted);
  EXPECT_TRUE(s->cancel(1).is_ok());
  EXPECT_TRUE(s->cancel(2).is_ok());
  EXPECT_EQ(s->cancel(2).code(), StatusCode::kNotFound);
  EXPECT_EQ(s->running(1), 0);
  EXPECT_EQ(s->queue_depth(1), 0);
  EXPECT_EQ(s->kv_blocks(1), 0);
  const Plan p = s->schedule(clock.now_ns());
  EXPECT_TRUE(has_event(p, EventKind::kCancelled, 1, Reason::kCancelled));
  EXPECT_TRUE(has_event(p, EventKind::kCancelled, 2, Reason::kCancelled));
  EXPECT_TRUE(p.entries.empty());
}

TEST(Scheduler, ResultsMustMatchThePlan) {
  auto s = make(base());
  ASSERT_TRUE(s->submit(req(1, 1, 10), 0).accepted);
  const Plan p = s->schedule(0);
  StepUpdate u;
  u.requests.push_back({99, StepOutcome::kOk, 1, 1, 1, false});
  EXPECT_EQ(s->update(p, u).code(), StatusCode::kInvalidArgument);
  u.requests = {{1, StepOutcome::kInvalid, 0, 0, 0, false}};
  EXPECT_TRUE(s->update(p, u).is_ok());
  EXPECT_FALSE(s->info(1).has_value());
  EXPECT_TRUE(has_event(s->schedule(0), EventKind::kFailed, 1, Reason::kEngineError));
}

}  // namespace
}  // namespace ts::sched
