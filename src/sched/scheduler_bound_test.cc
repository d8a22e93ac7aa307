// The fast tier's promise by construction, on a simulated slow machine: a discrete-event
// run of the scheduler with the FakeEngine, where every step takes the time a StepCost of a
// bandwidth-starved 2-core VM says (Gemma 3 270M there: ~2.2 ms per prompt token, ~3 ms per
// output row), steps are interrupted at layer boundaries when a fast request arrives, and
// the clock jumps from event to event. Checked, in simulated time (exact, no noise):
//  - every ultrafast request admitted on ultrafast waits behind other tiers' work (steps
//    carrying their tokens that run between its arrival and its start) at most
//    Scheduler::wait_bound_ns: its max wait, then the step in flight;
//  - offered beyond its share, the fast tier's requests are downgraded at arrival with
//    reason predicted_wait (said, not silently slowed), and the admitted ones start
//    within the bound;
//  - nothing is lost: every accepted request ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/rng.h"
#include "sched/scheduler.h"
#include "testing/fake_engine.h"

namespace ts::sched {
namespace {

using testing::FakeEngine;

constexpr int64_t kMs = 1'000'000;

// Gemma 3 270M on an AVX2-only 2-core VM with ~11 GB/s (the machine of the issue).
StepCost slow_machine() {
  StepCost c;
  c.fixed_ns = 2.0 * kMs;
  c.token_ns = 2.2 * kMs;
  c.output_ns = 3.0 * kMs;
  c.n_layers = 18;
  return c;
}

struct Arrival {
  int64_t at_ns;
  Request r;
};

struct Life {
  int64_t arrival_ns = 0;
  bool accepted = false;
  TierId served = -1;
  Reason reason = Reason::kNone;
  int64_t start_ns = -1;       // first step that computed it
  int64_t blocked_ns = 0;      // time in steps with other tiers' work while it waited
  int64_t first_out_ns = -1;   // end of the step that produced its first output
  bool ended = false;
};

struct Sim {
  Scheduler& s;
  FakeEngine e{16};
  StepCost cost;
  int64_t now = 0;
  std::vector<Arrival> arrivals;  // sorted by time
  size_t next = 0;
  std::map<RequestId, Life> life;
  int64_t n_steps = 0, n_interrupted = 0, n_forced = 0;
  // Time the steps spent on each tier's tokens (its tokens' cost and its part of the fixed
  // cost), and in all, over steps that completed.
  std::map<TierId, double> tier_ns;
  double busy_ns = 0;

  void admit_until(int64_t t) {
    while (next < arrivals.size() && arrivals[next].at_ns <= t) {
      const Arrival& a = arrivals[next++];
      const Decision d = s.submit(a.r, a.at_ns);
      Life& l = life[a.r.id];
      l.arrival_ns = a.at_ns;
      l.accepted = d.accepted;
      l.served = d.tier_served;
      l.reason = d.reason;
      if (!d.accepted) l.ended = true;
    }
  }

  bool interrupting(TierId t) const { return s.tier(t).config().interrupt; }

  void run(int64_t until_ns) {
    while (now < until_ns) {
      admit_until(now);
      const Plan p = s.schedule(now);
      for (const Event& ev : p.events)
        if (ev.kind == EventKind::kFinished || ev.kind == EventKind::kRejected || ev.kind == EventKind::kCancelled ||
            ev.kind == EventKind::kFailed)
          life[ev.id].ended = true;
      if (p.entries.empty()) {  // idle: jump to the next arrival
        if (next >= arrivals.size()) break;
        now = std::max(now, arrivals[next].at_ns);
        continue;
      }
      ++n_steps;
      n_forced += p.exclusive_forced;
      int64_t tokens = 0, outputs = 0, other = 0;
      for (const PlanEntry& en : p.entries) {
        tokens += en.n_tokens;
        outputs += en.n_outputs;
        if (!interrupting(en.tier)) other += en.n_tokens;
      }
      const int64_t dur = int64_t(cost.step_ns(tokens, outputs));
      // A fast arrival during an interruptible step abandons it at the next layer boundary.
      int64_t end = now + dur;
      bool cut = false;
      if (p.interruptible)
        for (size_t k = next; k < arrivals.size() && arrivals[k].at_ns < end; ++k)
          if (interrupting(arrivals[k].r.tier)) {
            const int64_t seg = std::max<int64_t>(1, int64_t(cost.segment_ns(tokens, 0)));
            end = std::min(end, now + ((arrivals[k].at_ns - now) / seg + 1) * seg);
            cut = true;
            break;
          }
      // Time behind others: fast requests waiting through this step (not in it).
      if (other > 0) {
        std::vector<RequestId> in_step;
        for (const PlanEntry& en : p.entries) in_step.push_back(en.id);
        for (auto& [id, l] : life) {
          if (!l.accepted || l.start_ns >= 0 || l.ended || !interrupting(l.served)) continue;
          if (std::find(in_step.begin(), in_step.end(), id) != in_step.end()) continue;
          const int64_t from = std::max(now, l.arrival_ns);
          if (end > from) l.blocked_ns += end - from;
        }
      }
      StepUpdate u;
      if (cut) {
        ++n_interrupted;
        for (const PlanEntry& en : p.entries) {
          RequestResult r;
          r.id = en.id;
          r.outcome = StepOutcome::kInterrupted;
          r.n_computed = en.pos0;
          u.requests.push_back(r);
        }
      } else {
        std::map<TierId, double> own;
        double sum = 0;
        for (const PlanEntry& en : p.entries) {
          const double x = cost.token_ns * double(en.n_tokens) + cost.output_ns * double(en.n_outputs);
          own[en.tier] += x;
          sum += x;
        }
        for (const auto& [t, x] : own) tier_ns[t] += x + (sum > 0 ? cost.fixed_ns * x / sum : 0);
        busy_ns += double(dur);
        u = e.step(p);
        for (const PlanEntry& en : p.entries) {
          Life& l = life[en.id];
          if (l.start_ns < 0) l.start_ns = now;
          if (en.n_outputs > 0 && l.first_out_ns < 0) l.first_out_ns = end;
        }
      }
      EXPECT_TRUE(s.update(p, u).is_ok());
      for (auto& [id, l] : life)
        if (l.accepted && !l.ended && !s.info(id)) l.ended = true;
      now = end;
    }
  }
};

std::vector<Arrival> poisson(Rng& rng, TierId tier, double per_s, int64_t prompt, int64_t out, int64_t until_ns,
                             RequestId& id) {
  std::vector<Arrival> v;
  double t = 0;
  for (;;) {
    t += -std::log(1.0 - rng.uniform()) / per_s;
    if (t * 1e9 >= double(until_ns)) break;
    Request r;
    r.id = id++;
    r.tier = tier;
    r.n_prompt_tokens = prompt;
    r.max_output_tokens = out;
    v.push_back({int64_t(t * 1e9), r});
  }
  return v;
}

std::unique_ptr<Scheduler> make_slow() {
  SchedConfig c = default_config();
  c.step_token_budget = 64;
  c.kv_blocks_total = 1 << 20;
  c.kv_block_size = 16;
  auto s = Scheduler::create(c);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  (*s)->set_step_cost(slow_machine());
  return std::move(s).value();
}

// The machine computes ~450 prompt tokens/s. Standard: 40-token prompts and 32 outputs at
// several times what it sustains; ultrafast: 260-token prompts (the 200 words) at
// `fast_per_s`.
void flood(Sim& sim, double fast_per_s, int64_t horizon_ns) {
  Rng rng(2026);
  RequestId id = 1;
  auto fast = poisson(rng, 0, fast_per_s, 260, 16, horizon_ns, id);
  auto std_ = poisson(rng, 1, 12.0, 40, 32, horizon_ns, id);
  sim.arrivals = fast;
  sim.arrivals.insert(sim.arrivals.end(), std_.begin(), std_.end());
  std::sort(sim.arrivals.begin(), sim.arrivals.end(), [](const Arrival& a, const Arrival& b) { return a.at_ns < b.at_ns; });
}

void check_bound(const Sim& sim, const Scheduler& s, int* n_fast_admitted, int* n_fast_told) {
  const int64_t bound = *s.wait_bound_ns(0);
  int64_t worst = 0;
  *n_fast_admitted = *n_fast_told = 0;
  for (const auto& [id, l] : sim.life) {
    if (sim.arrivals.empty()) break;
    const bool fast = std::find_if(sim.arrivals.begin(), sim.arrivals.end(), [&](const Arrival& a) {
                        return a.r.id == id && a.r.tier == 0;
                      }) != sim.arrivals.end();
    if (!fast) continue;
    if (l.accepted && l.served == 0) {
      ++*n_fast_admitted;
      EXPECT_LE(l.blocked_ns, bound) << "request " << id << " waited " << l.blocked_ns / kMs
                                     << " ms behind other tiers (bound " << bound / kMs << " ms)";
      worst = std::max(worst, l.blocked_ns);
    } else {
      ++*n_fast_told;
      EXPECT_EQ(l.reason, Reason::kPredictedWait) << "request " << id;
    }
  }
  std::printf("bound %lld ms, worst wait behind other tiers %lld ms; %d admitted on ultrafast, %d told\n",
              (long long)(bound / kMs), (long long)(worst / kMs), *n_fast_admitted, *n_fast_told);
}

TEST(SchedulerBound, WaitBoundIsMaxWaitPlusOneStep) {
  auto s = make_slow();
  const StepCost c = slow_machine();
  // The step in flight when the max wait is over: 64 tokens with up to 32 decode rows of
  // standard and batch (max_batch 16 each), or an exclusive step of the tier itself, which
  // its burst keeps within the max wait.
  EXPECT_EQ(*s->wait_bound_ns(0), 200 * kMs + std::max<int64_t>(200 * kMs, int64_t(c.step_ns(64, 32))));
  EXPECT_FALSE(s->wait_bound_ns(1).has_value());  // not an interrupting tier
}

TEST(SchedulerBound, FastTierWithinItsShareWaitsWithinTheBound) {
  auto s = make_slow();
  Sim sim{*s};
  sim.cost = slow_machine();
  const int64_t horizon = 120'000 * kMs;
  flood(sim, 0.25, horizon);  // ~65 prompt tokens/s of ~450: within its 0.3 share
  sim.run(horizon + 60'000 * kMs);
  int admitted = 0, told = 0;
  check_bound(sim, *s, &admitted, &told);
  EXPECT_GE(admitted, 20);
  for (const auto& [id, l] : sim.life) EXPECT_TRUE(l.ended) << "request " << id << " never ended";
  std::printf("%lld steps, %lld interrupted, %lld forced exclusive\n", (long long)sim.n_steps,
              (long long)sim.n_interrupted, (long long)sim.n_forced);
}

TEST(SchedulerBound, FastTierBeyondItsShareIsToldAndTheAdmittedWaitWithinTheBound) {
  auto s = make_slow();
  Sim sim{*s};
  sim.cost = slow_machine();
  const int64_t horizon = 120'000 * kMs;
  flood(sim, 1.2, horizon);  // ~310 prompt tokens/s: two thirds of the machine, over twice its share
  sim.run(horizon + 60'000 * kMs);
  int admitted = 0, told = 0;
  check_bound(sim, *s, &admitted, &told);
  EXPECT_GE(admitted, 20);
  EXPECT_GE(told, 20);  // the excess is downgraded at arrival, with its reason
  for (const auto& [id, l] : sim.life) EXPECT_TRUE(l.ended) << "request " << id << " never ended";
  std::printf("%lld steps, %lld interrupted, %lld forced exclusive\n", (long long)sim.n_steps,
              (long long)sim.n_interrupted, (long long)sim.n_forced);
}

// The prediction itself: an idle fast tier with its allowance is predicted one
// uninterruptible stretch (whatever a stale capped rate says); work ahead costs its prompt
// time; past the allowance the rest goes at the nominal capped rate.
TEST(SchedulerBound, PredictedWaitOfTheFastTier) {
  auto s = make_slow();
  const StepCost c = slow_machine();
  const double seg = c.segment_ns(64, 0);
  EXPECT_NEAR(double(*s->predicted_wait_ns(0, 260)), seg, 1e3);
  Request r;
  r.id = 1;
  r.tier = 0;
  r.n_prompt_tokens = 100;
  r.max_output_tokens = 4;
  ASSERT_TRUE(s->submit(r, 0).accepted);
  // 100 tokens ahead, all within the window's allowance (0.3 x 64 x 64 = 1228 tokens).
  EXPECT_NEAR(double(*s->predicted_wait_ns(0, 260)), seg + 100 * c.token_ns, 1e3);
  // 2000 tokens of work: 1228 at full speed, the rest at 1 / 0.3 the time per token.
  EXPECT_NEAR(double(*s->predicted_wait_ns(0, 1900)), seg + 1228 * c.token_ns + 772 * c.token_ns / 0.3 - 1900 * c.token_ns,
              1e3);
  // The request alone is admitted; one that would wait over 200 ms is downgraded to standard.
  r.id = 2;
  r.n_prompt_tokens = 40;
  const Decision d = s->submit(r, 0);
  ASSERT_TRUE(d.accepted);
  EXPECT_EQ(d.tier_served, 1);
  EXPECT_EQ(d.reason, Reason::kPredictedWait);
}

// Stable latency, in simulated time: the default tiers with the step cost this tierserve
// measured for Gemma 3 270M on a 2-vCPU Xeon with its AVX2 kernels (a budget of 128 and a
// burst of 128, as derived there), 209-token fast prompts at 0.469 req/s (half the fast
// tier's share), alone and against a standard flood at 3x what the machine sustains. The
// fast tier's TTFT under the flood stays within 1.1x of its solo value at P50 and P99
// (the target is 1.5x, its goal 1.25x), and standard keeps its floor in time.
// This holds because floors are kept in time (floors_allow_exclusive): standard, decoding
// 16 rows a step, is owed the cost of those rows, not a half budget of tokens it never
// asked for, so the fast prompt's second exclusive step is not refused.
TEST(SchedulerBound, FastTtftUnderAFloodStaysNearItsSoloValue) {
  StepCost c;
  c.fixed_ns = 12.3 * kMs;
  c.token_ns = 1.22 * kMs;
  c.output_ns = 1.77 * kMs;
  c.pair_ns = 2500;
  c.n_layers = 18;
  double p50[2] = {0, 0}, p99[2] = {0, 0};
  for (int flooded = 0; flooded < 2; ++flooded) {
    SchedConfig cfg = default_config();
    cfg.step_token_budget = 128;
    cfg.tiers[0].burst_tokens = 128;
    cfg.kv_blocks_total = 1 << 20;
    cfg.kv_block_size = 16;
    auto s = Scheduler::create(cfg);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    (*s)->set_step_cost(c);
    Sim sim{**s};
    sim.cost = c;
    Rng rng(2026);
    RequestId id = 1;
    const int64_t horizon = 200'000 * kMs;
    const auto fast = poisson(rng, 0, 0.469, 209, 16, horizon, id);
    sim.arrivals = fast;
    if (flooded) {
      const auto st = poisson(rng, 1, 17.5, 40, 32, horizon, id);
      sim.arrivals.insert(sim.arrivals.end(), st.begin(), st.end());
    }
    std::sort(sim.arrivals.begin(), sim.arrivals.end(), [](const Arrival& a, const Arrival& b) { return a.at_ns < b.at_ns; });
    sim.run(horizon + 60'000 * kMs);
    std::vector<double> ttft;
    for (const auto& a : fast) {
      const Life& l = sim.life[a.r.id];
      ASSERT_TRUE(l.accepted && l.served == 0) << "fast request " << a.r.id << " was told (within its share)";
      ASSERT_GE(l.first_out_ns, 0) << "fast request " << a.r.id;
      ttft.push_back(double(l.first_out_ns - l.arrival_ns) / 1e6);
    }
    ASSERT_GE(ttft.size(), 60u);
    std::sort(ttft.begin(), ttft.end());
    p50[flooded] = ttft[ttft.size() / 2];
    p99[flooded] = ttft[size_t(0.99 * double(ttft.size() - 1))];
    if (flooded) {
      // Standard had demand throughout: its floor (0.5) is a lower bound on its time.
      EXPECT_GE(sim.tier_ns[1] / sim.busy_ns, 0.5) << sim.tier_ns[1] / 1e9 << " s of " << sim.busy_ns / 1e9;
      std::printf("standard got %.2f of the engine's time\n", sim.tier_ns[1] / sim.busy_ns);
    }
  }
  std::printf("fast TTFT P50 / P99: alone %.0f / %.0f ms, under the flood %.0f / %.0f ms (%.2fx / %.2fx)\n", p50[0],
              p99[0], p50[1], p99[1], p50[1] / p50[0], p99[1] / p99[0]);
  EXPECT_LE(p50[1], 1.1 * p50[0]);
  EXPECT_LE(p99[1], 1.1 * p99[0]);
}

}  // namespace
}  // namespace ts::sched
