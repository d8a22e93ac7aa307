// Long seeded random runs: arrivals on every tier, cancellations, ample and tight KV.
// Every step: the budget holds, every tier with demand it can use gets at least its floor,
// tiers that do not borrow stay under their cap, no priority inversion, the scheduler's
// KV accounting equals the fake engine's. At the end: every accepted request finished or
// ended with an explicit event, exactly once (nothing lost). Same seed, same plans.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"
#include "sched/scheduler.h"
#include "testing/fake_engine.h"

namespace ts::sched {
namespace {

struct RunStats {
  int64_t submitted = 0, accepted = 0, rejected_at_submit = 0;
  std::map<EventKind, int64_t> ended;  // by kind
  int64_t preempted = 0, steps = 0;
  std::vector<std::string> plans;
};

RunStats run(uint64_t seed, int32_t kv_blocks, int n_steps, bool check = true, double load = 1.0) {
  SchedConfig c = default_config();
  c.step_token_budget = 256;
  c.kv_blocks_total = kv_blocks;
  c.kv_block_size = 16;
  c.tiers[2].max_batch = 8;
  auto made = Scheduler::create(c);
  EXPECT_TRUE(made.is_ok());
  Scheduler& s = **made;
  testing::FakeEngine e(16);
  ManualClock clock;
  Rng rng(seed);
  RunStats st;
  std::map<RequestId, bool> open;  // accepted, not ended
  RequestId next_id = 1;
  const double p_arrive[3] = {0.08, 0.25, 0.1};

  auto note_events = [&](const Plan& p) {
    for (const Event& ev : p.events) {
      if (ev.kind == EventKind::kPreempted) {
        ++st.preempted;
        continue;
      }
      if (ev.kind == EventKind::kPromoted || ev.kind == EventKind::kDowngraded) continue;
      ++st.ended[ev.kind];
      EXPECT_EQ(open.erase(ev.id), 1u) << "request " << ev.id << " ended twice or was never accepted";
    }
  };

  for (int step = 0; step < n_steps || s.n_active() > 0; ++step) {
    if (step > n_steps + 50000) {
      ADD_FAILURE() << "did not drain";
      break;
    }
    const bool arrivals = step < n_steps;
    for (TierId t = 0; arrivals && t < 3; ++t) {
      if (rng.uniform() >= p_arrive[t] * load) continue;
      Request r;
      r.id = next_id++;
      r.tier = t;
      r.n_prompt_tokens = 1 + int64_t(rng.next_u64() % 300);
      r.max_output_tokens = 1 + int64_t(rng.next_u64() % 64);
      ++st.submitted;
      const Decision d = s.submit(r, clock.now_ns());
      if (d.accepted) {
        ++st.accepted;
        open[r.id] = true;
      } else {
        ++st.rejected_at_submit;
        EXPECT_NE(d.reason, Reason::kNone);
      }
    }
    if (arrivals && !open.empty() && rng.uniform() < 0.01) {
      auto it = open.begin();
      std::advance(it, ptrdiff_t(rng.next_u64() % open.size()));
      if (s.info(it->first)) {  // else it ended already; its event is in the next plan
        EXPECT_TRUE(s.cancel(it->first).is_ok());
      }
    }

    const Plan p = s.schedule(clock.now_ns());
    st.plans.push_back(testing::describe(p));
    note_events(p);
    if (check) {
      // Only bursting tiers compute past the budget, each by at most its burst.
      int64_t burst_total = 0, non_burst = 0;
      for (TierId t = 0; t < 3; ++t) {
        burst_total += s.tier(t).config().burst_tokens;
        if (s.tier(t).config().burst_tokens == 0) non_burst += p.tiers[size_t(t)].tokens_planned;
      }
      EXPECT_LE(p.n_tokens(), c.step_token_budget + burst_total);
      EXPECT_LE(non_burst, c.step_token_budget) << "step " << p.step;
      bool any_kv_limited = false;
      for (TierId t = 0; t < 3; ++t) {
        const TierStep& ts = p.tiers[size_t(t)];
        any_kv_limited |= ts.kv_limited;
        if (!ts.kv_limited) {
          EXPECT_GE(ts.tokens_planned, std::min(ts.tokens_floor, ts.tokens_demand))
              << "tier " << t << " below its floor at step " << p.step;
        }
        if (!s.tier(t).borrows()) {
          EXPECT_LE(ts.tokens_planned, ts.tokens_cap) << "tier " << t << " above its cap";
        }
      }
      if (!any_kv_limited) {
        EXPECT_EQ(p.n_priority_inversions, 0) << "step " << p.step;
      }
    }
    const StepUpdate u = e.step(p);
    EXPECT_TRUE(s.update(p, u).is_ok());
    if (check) {
      EXPECT_EQ(testing::used_blocks(s), s.kv_blocks(0) + s.kv_blocks(1) + s.kv_blocks(2)) << "step " << p.step;
    }
    clock.advance_ns(5'000'000);
    st.steps = step;
  }
  note_events(s.schedule(clock.now_ns()));
  EXPECT_TRUE(open.empty()) << open.size() << " accepted requests never ended";
  return st;
}

int64_t total_ended(const RunStats& st) {
  int64_t n = 0;
  for (auto& [k, v] : st.ended) n += v;
  std::printf("steps %lld submitted %lld accepted %lld rejected-at-submit %lld preempted %lld:",
              (long long)st.steps, (long long)st.submitted, (long long)st.accepted,
              (long long)st.rejected_at_submit, (long long)st.preempted);
  for (auto& [k, v] : st.ended) std::printf(" %s %lld", event_kind_name(k), (long long)v);
  std::printf("\n");
  return n;
}

TEST(SchedulerProperty, NoStarvationNothingLostAmpleKv) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const RunStats st = run(seed, 100000, 4000);
    EXPECT_EQ(st.submitted, st.accepted + st.rejected_at_submit);
    EXPECT_EQ(st.accepted, total_ended(st));
    EXPECT_GT(st.ended.at(EventKind::kFinished), 100);
  }
}

TEST(SchedulerProperty, NoStarvationNothingLostTightKv) {
  for (uint64_t seed : {4u, 5u}) {
    const RunStats st = run(seed, 160, 4000);  // 2560 cells: preemption is routine
    EXPECT_EQ(st.submitted, st.accepted + st.rejected_at_submit);
    EXPECT_EQ(st.accepted, total_ended(st));
    EXPECT_GT(st.ended.at(EventKind::kFinished), 100);
    EXPECT_GT(st.preempted, 0);
  }
}

TEST(SchedulerProperty, OverloadEndsEveryRequestExplicitly) {
  // About 1.5x what the step budget sustains (6x the base rates): long queues, promotions,
  // and with tight KV preemption storms, timeouts and admission rejections.
  for (uint64_t seed : {6u, 7u}) {
    for (int32_t kv : {100000, 160}) {
      const RunStats st = run(seed, kv, 3000, true, 6.0);
      EXPECT_EQ(st.submitted, st.accepted + st.rejected_at_submit);
      EXPECT_EQ(st.accepted, total_ended(st));
      // Accepted requests end with a complete response: the growth reserve, batch slots
      // kept for running requests and the deadlock breaker leave no kv_exhausted (this
      // run failed 18% of its accepted requests before them).
      EXPECT_EQ(st.ended.count(EventKind::kFailed), 0u) << "seed " << seed << " kv " << kv;
      EXPECT_LT(st.preempted, st.accepted / 2) << "preemption churn";
    }
  }
}

TEST(SchedulerProperty, SameSeedSamePlans) {
  const RunStats a = run(77, 160, 1500, false);
  const RunStats b = run(77, 160, 1500, false);
  ASSERT_EQ(a.plans.size(), b.plans.size());
  for (size_t i = 0; i < a.plans.size(); ++i) ASSERT_EQ(a.plans[i], b.plans[i]) << "plan " << i;
  const RunStats c = run(78, 160, 1500, false);
  EXPECT_NE(a.plans, c.plans);
}

}  // namespace
}  // namespace ts::sched
