// The tier rules, one behaviour per test, with hand-made step results (FakeEngine) and a
// ManualClock: floors, caps, borrowing, timeouts, admission, preemption, cancellation.
#include <algorithm>

#include "testing/scheduler_setup.h"

namespace ts::sched {
namespace {

TEST(Scheduler, FloorHoldsUnderFloodOfHigherTier) {
  auto s = make(base());
  FakeEngine e(16);
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
  FakeEngine e(16);
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
    FakeEngine e(16);
    ManualClock clock;
    for (RequestId id = 1; id <= 10; ++id) ASSERT_TRUE(s->submit(req(id, 0, 300), 0).accepted);
    const Plan p = run_step(*s, e, clock);
    EXPECT_EQ(p.tiers[0].tokens_planned, 100);  // alone: the whole budget despite share_max 0.3
  }
  {
    SchedConfig c = base();
    c.tiers[0].borrow = false;
    auto s = make(c);
    FakeEngine e(16);
    ManualClock clock;
    for (RequestId id = 1; id <= 10; ++id) ASSERT_TRUE(s->submit(req(id, 0, 300), 0).accepted);
    const Plan p = run_step(*s, e, clock);
    EXPECT_EQ(p.tiers[0].tokens_planned, 30);  // hard cap
  }
}

TEST(Scheduler, DecodesAndPromptChunksShareTheBudget) {
  auto s = make(base(64));
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(1);
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
  EXPECT_EQ(used_blocks(*s), s->kv_blocks(0) + s->kv_blocks(1) + s->kv_blocks(2));
}

TEST(Scheduler, PreemptionBudgetIsRespected) {
  auto s = make(kv_config());
  FakeEngine e(1);
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
  FakeEngine e(1);
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
  EXPECT_EQ(used_blocks(*s), 0);
}

TEST(Scheduler, LowerTierBelowFloorTakesBackWhatWasLent) {
  auto s = make(kv_config());
  FakeEngine e(1);
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
  FakeEngine e(4);
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
  EXPECT_EQ(used_blocks(*s), 0);

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
  FakeEngine e(16);
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

// The scheduler owns the blocks: whatever it plans has its cells (the fake engine checks
// each entry's table), two requests that cannot both fit take turns, and every block
// comes back.
TEST(Scheduler, EveryPlannedTokenHasItsCell) {
  auto s = make(base(100, 6, 16));
  FakeEngine e(16);
  ManualClock clock;
  ASSERT_TRUE(s->submit(req(1, 1, 40, 5), 0).accepted);
  ASSERT_TRUE(s->submit(req(2, 1, 40, 5), 0).accepted);
  for (int i = 0; i < 40 && s->n_active() > 0; ++i) {
    const Plan p = run_step(*s, e, clock);
    std::vector<int32_t> all;
    for (const PlanEntry& en : p.entries) all.insert(all.end(), en.blocks.begin(), en.blocks.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a block in two tables: " << testing::describe(p);
    EXPECT_LE(all.size(), 6u);
  }
  EXPECT_EQ(s->n_active(), 0);
  EXPECT_EQ(used_blocks(*s), 0);
  EXPECT_EQ(s->kv_blocks_available(), 6);
}

// A prompt whose first blocks are cached is planned from the end of its hit: the hit is
// not computed again and its tokens are not counted as demand; another key sees nothing.
TEST(Scheduler, ACachedPrefixIsKnownWhenPlanned) {
  auto s = make(base(100, 64, 16));
  FakeEngine e(16);
  ManualClock clock;
  auto with_ids = [](RequestId id, std::vector<int32_t> t, uint64_t key) {
    Request r = req(id, 1, int64_t(t.size()), 2);
    r.tokens = std::move(t);
    r.isolation_key = key;
    return r;
  };
  std::vector<int32_t> a(40), b(40);
  for (int i = 0; i < 40; ++i) a[size_t(i)] = b[size_t(i)] = 100 + i;
  for (int i = 32; i < 40; ++i) b[size_t(i)] = 500 + i;
  ASSERT_TRUE(s->submit(with_ids(1, a, 9), 0).accepted);
  for (int i = 0; i < 10 && s->n_active() > 0; ++i) run_step(*s, e, clock);
  ASSERT_EQ(s->n_active(), 0);
  EXPECT_EQ(s->kv().pool().n_cached(), 2);  // two full blocks of request 1's prompt

  ASSERT_TRUE(s->submit(with_ids(2, b, 9), clock.now_ns()).accepted);
  ASSERT_TRUE(s->submit(with_ids(3, b, 8), clock.now_ns()).accepted);
  const Plan p = run_step(*s, e, clock);
  ASSERT_EQ(p.entries.size(), 2u) << testing::describe(p);
  EXPECT_EQ(p.entries[0].id, 2u);
  EXPECT_EQ(p.entries[0].kind, EntryKind::kStart);
  EXPECT_EQ(p.entries[0].pos0, 32);
  EXPECT_EQ(p.entries[0].n_tokens, 8);
  EXPECT_EQ(p.entries[1].pos0, 0);  // key 8 never computed it
  EXPECT_EQ(p.entries[1].n_tokens, 40);
  EXPECT_EQ(p.tiers[1].tokens_demand, 48);
  EXPECT_EQ(s->info(2)->n_computed, 40);
  for (int i = 0; i < 10 && s->n_active() > 0; ++i) run_step(*s, e, clock);
  EXPECT_EQ(s->n_active(), 0);
  EXPECT_TRUE(s->kv().check_consistency());
}

TEST(Scheduler, CancelQueuedAndRunning) {
  auto s = make(base());
  FakeEngine e(16);
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
  u.requests.push_back({99, StepOutcome::kOk, 1, 1, {FakeEngine::kSample}, false});
  EXPECT_EQ(s->update(p, u).code(), StatusCode::kInvalidArgument);
  u.requests = {{1, StepOutcome::kInvalid, 0, 0, {}, false}};
  EXPECT_TRUE(s->update(p, u).is_ok());
  EXPECT_FALSE(s->info(1).has_value());
  EXPECT_TRUE(has_event(s->schedule(0), EventKind::kFailed, 1, Reason::kEngineError));
}

}  // namespace
}  // namespace ts::sched
