// A model-free stand-in for the engine in scheduler tests: it computes every planned
// token in the blocks the plan gives and samples one token per output (token id
// kSample), so the tests drive schedule() -> step -> update() with hand-checkable
// numbers. The scheduler owns the KV blocks; the fake checks that every entry's blocks
// hold its positions, as the engine does.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "sched/scheduler.h"

namespace ts::sched::testing {

class FakeEngine {
 public:
  // block_size: the scheduler config's kv_block_size.
  explicit FakeEngine(int32_t block_size = 16) : block_size_(block_size) {}

  StepUpdate step(const Plan& plan) {
    StepUpdate u;
    for (const PlanEntry& e : plan.entries) {
      RequestResult r;
      r.id = e.id;
      EXPECT_GE(int64_t(e.blocks.size()) * block_size_, e.pos0 + e.n_tokens) << "request " << e.id;
      r.n_computed = e.pos0 + e.n_tokens;
      r.n_sampled = e.n_outputs;
      r.sampled.assign(size_t(e.n_outputs), sample_);
      u.requests.push_back(r);
    }
    return u;
  }

  static constexpr int32_t kSample = 7;  // the token every output samples

 private:
  const int32_t sample_ = kSample;
  int32_t block_size_;
};

// Blocks referenced by requests (the scheduler's pool), for the held == used checks.
inline int32_t used_blocks(const Scheduler& s) { return s.kv().pool().n_used(); }

// One line per plan: entries, preemptions and events, for determinism checks.
inline std::string describe(const Plan& p) {
  std::ostringstream o;
  o << "step " << p.step << " t=" << p.now_ns << ":";
  for (RequestId id : p.preempt) o << " P" << id;
  for (const PlanEntry& e : p.entries) o << " " << e.id << "@" << e.tier << "x" << e.n_tokens << "/" << e.n_outputs;
  for (const Event& e : p.events) o << " [" << event_kind_name(e.kind) << " " << e.id << " " << reason_name(e.reason) << "]";
  return o.str();
}

}  // namespace ts::sched::testing
