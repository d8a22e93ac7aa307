// The latency tier's bursts and interrupts, one behaviour per test with hand-made step
// results (FakeEngine) and a ManualClock: a burst on top of the budget within the windowed
// cap, exclusive steps that keep the floors, interrupted steps planned again, a promoted
// fast request served next or told, an interrupt flood that cannot starve the floors.
#include "testing/scheduler_setup.h"

namespace ts::sched {
namespace {

// A latency tier at a low rate runs its whole prompt in one step on top of the budget,
// while the flooding tier keeps its full budget: the fast request does not wait for
// chunks of 0.3 x budget, and the others' steps are not taken from them.
TEST(Scheduler, BurstRunsALowRatePromptInOneStepOnTopOfTheBudget) {
  SchedConfig c = base(64);
  c.tiers[0].burst_tokens = 512;
  auto s = make(c);
  FakeEngine e(16);
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
  FakeEngine e2(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e2(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
  FakeEngine e(16);
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
    clock.advance_ns(10 * kMs);
  }
  EXPECT_GT(n_interrupted, 0);
  EXPECT_GE(standard, floor_owed) << n_interrupted << " interrupted plans";
}

}  // namespace
}  // namespace ts::sched
