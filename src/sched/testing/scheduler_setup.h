// The scheduler tests' shared set-up: configs, requests, one step against a FakeEngine.
#pragma once

#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/clock.h"
#include "fake_engine.h"

namespace ts::sched {
namespace {

using testing::FakeEngine;
using testing::used_blocks;

constexpr int64_t kMs = 1'000'000;

inline std::unique_ptr<Scheduler> make(const SchedConfig& c) {
  auto s = Scheduler::create(c);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return std::move(s).value();
}

inline SchedConfig base(int64_t budget = 100, int32_t kv_blocks = 100000, int32_t block_size = 16) {
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

inline Request req(RequestId id, TierId tier, int64_t prompt, int64_t max_out = 1000) {
  Request r;
  r.id = id;
  r.tier = tier;
  r.n_prompt_tokens = prompt;
  r.max_output_tokens = max_out;
  return r;
}

// Runs one step: schedule, fake engine, update. Returns the plan.
inline Plan run_step(Scheduler& s, FakeEngine& e, ManualClock& clock, int64_t dt_ns = 10 * kMs) {
  Plan p = s.schedule(clock.now_ns());
  StepUpdate u = e.step(p);
  EXPECT_TRUE(s.update(p, u).is_ok());
  clock.advance_ns(dt_ns);
  return p;
}

// A 64-token budget with ultrafast bursting and interrupting (the defaults' latency tier).
inline SchedConfig interrupting() {
  SchedConfig c = base(64);
  c.tiers[0].burst_tokens = 512;
  c.tiers[0].interrupt = true;
  return c;
}

// The engine's answer to a plan it abandoned (Plan::interruptible): nothing changed.
inline StepUpdate interrupted(const Scheduler& s, const Plan& p) {
  StepUpdate u;
  for (const PlanEntry& en : p.entries) {
    RequestResult r;
    r.id = en.id;
    r.outcome = StepOutcome::kInterrupted;
    r.n_computed = en.pos0;
    u.requests.push_back(r);
  }
  return u;
}

inline bool has_event(const Plan& p, EventKind k, RequestId id, Reason r) {
  for (const Event& e : p.events)
    if (e.kind == k && e.id == id && e.reason == r) return true;
  return false;
}

}  // namespace
}  // namespace ts::sched
