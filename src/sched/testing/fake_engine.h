// A model-free stand-in for the engine in scheduler tests: it computes every planned
// token, samples one token per output and counts KV blocks like the engine's pool, so the
// tests drive schedule() -> step -> update() with hand-checkable numbers.
#pragma once

#include <map>
#include <sstream>
#include <string>

#include "kv/blocks.h"
#include "sched/scheduler.h"

namespace ts::sched::testing {

class FakeEngine {
 public:
  FakeEngine(int32_t n_blocks, int32_t block_size) : n_blocks_(n_blocks), block_size_(block_size) {}

  // Runs the plan: preemptions first, then entries in order (kNoRoom when short).
  StepUpdate step(const Plan& plan) {
    for (RequestId id : plan.preempt) {
      auto it = seqs_.find(id);
      if (it == seqs_.end()) continue;
      used_ -= it->second.n_blocks;
      it->second = {};
    }
    StepUpdate u;
    for (const PlanEntry& e : plan.entries) {
      Seq& s = seqs_[e.id];
      RequestResult r;
      r.id = e.id;
      const int64_t need = kv::blocks_to_append(s.n_computed, s.n_blocks, e.n_tokens, block_size_);
      if (need > n_blocks_ - used_) {
        r.outcome = StepOutcome::kNoRoom;
      } else {
        used_ += int32_t(need);
        s.n_blocks += int32_t(need);
        s.n_computed += e.n_tokens;
        r.n_sampled = e.n_outputs;
      }
      r.n_computed = s.n_computed;
      r.n_blocks = s.n_blocks;
      u.requests.push_back(r);
    }
    u.kv_blocks_total = n_blocks_;
    u.kv_blocks_available = n_blocks_ - used_;
    return u;
  }

  // Frees the sequences the scheduler no longer knows (finished, failed, cancelled).
  void sync(const Scheduler& s) {
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      if (!s.info(it->first)) {
        used_ -= it->second.n_blocks;
        it = seqs_.erase(it);
      } else {
        ++it;
      }
    }
  }

  int32_t used() const { return used_; }

 private:
  struct Seq {
    int64_t n_computed = 0;
    int32_t n_blocks = 0;
  };
  int32_t n_blocks_, block_size_;
  int32_t used_ = 0;
  std::map<RequestId, Seq> seqs_;
};

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
