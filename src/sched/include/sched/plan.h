// The step contract on the scheduler's side (docs/architecture.md, engine/step.h): a Plan is plain
// data: counts, and for each entry the KV blocks the scheduler allocated for it while
// planning (it owns the block pool, kv/kv_manager.h). The serving layer holds the token
// ids, builds engine::StepPlan from it, runs the step and copies what the scheduler needs
// into a StepUpdate. Both can be made by hand, which is how the tests drive the scheduler
// without a model.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "sched/request.h"

namespace ts::sched {

enum class EntryKind : uint8_t {
  kStart,     // first step: serving adds the sequence (pos0 > 0: a cached prefix is reused)
  kResume,    // after preemption: serving recomputes from the sequence's tokens at pos0
  kContinue,  // already in KV
};

struct PlanEntry {
  RequestId id = 0;
  TierId tier = 0;         // the tier serving it now
  EntryKind kind = EntryKind::kContinue;
  int64_t pos0 = 0;        // the request's n_computed: a prefix hit counts already
  int64_t n_tokens = 0;    // tokens to compute after pos0 (>= 1)
  int32_t n_outputs = 0;   // 1 when the chunk reaches the last known token, else 0
  bool speculative = false;  // the tier allows speculative decoding
  // Its block table: room for pos0 + n_tokens positions (speculative drafts may use the
  // rest of the last block, never more).
  std::vector<int32_t> blocks;
};

// What one tier got in this step, for the share gauge and the invariants.
struct TierStep {
  int64_t tokens_demand = 0;   // tokens it could have used (within max_batch, chunks)
  int64_t tokens_floor = 0;    // share_min x budget
  int64_t tokens_cap = 0;      // share_max x budget (borrowing and promotion may exceed it)
  int64_t tokens_planned = 0;  // tokens in the plan
  bool kv_limited = false;     // it had demand the KV cache could not hold this step
  int32_t kv_blocks_held = 0;  // blocks its requests hold after this plan's preemptions
  int32_t kv_blocks_floor = 0;
  int32_t n_queued = 0;        // waiting (new or preempted), after this plan
  int32_t n_running = 0;       // holding KV, after this plan
  int32_t n_planned = 0;       // requests in the plan
};

struct Plan {
  int64_t step = 0;            // 1, 2, ... in schedule() order
  int64_t now_ns = 0;
  int64_t token_budget = 0;
  // Preempted while planning: their KV is freed already; they recompute from pos0 later.
  std::vector<RequestId> preempt;
  // In priority order (tier, then the tier's order). Every entry's blocks are allocated:
  // the engine never runs out of room for a plan.
  std::vector<PlanEntry> entries;
  // (src, dst) KV blocks to copy before the step (copy-on-write of a shared block).
  std::vector<std::pair<int32_t, int32_t>> copies;
  std::vector<TierStep> tiers;  // indexed by TierId
  // Every decision since the previous plan (admission shedding, timeouts, preemptions,
  // finishes and failures seen by update(), cancellations), in order.
  std::vector<Event> events;
  // Steps where a higher tier waited with nothing while a lower one got more than its
  // floor and the higher tier was below its cap (should stay 0; a metrics counter).
  int32_t n_priority_inversions = 0;
  // Only interrupting tiers' work (TierConfig::interrupt): one of them has prompt left.
  bool exclusive = false;
  // ... and a promoted request of such a tier took it although the window's limits would
  // not have allowed it: only for a tier whose on_predicted_wait is `admit` (else such a
  // request is downgraded or refused at that point; Scheduler::make_exclusive).
  bool exclusive_forced = false;
  // The engine may abandon this step when an interrupting tier's request arrives: the
  // plan has no prompt work of such a tier and one of them may take the next step.
  bool interruptible = false;

  int64_t n_tokens() const {
    int64_t n = 0;
    for (const PlanEntry& e : entries) n += e.n_tokens;
    return n;
  }
};

// kInterrupted: the engine abandoned the step (Plan::interruptible); nothing changed.
enum class StepOutcome : uint8_t { kOk, kInvalid, kInterrupted };

// What happened to one plan entry (engine::SeqResult, reduced to counts).
struct RequestResult {
  RequestId id = 0;
  StepOutcome outcome = StepOutcome::kOk;
  int64_t n_computed = 0;   // tokens in KV after the step (pos0 + the tokens kept)
  int32_t n_sampled = 0;    // tokens accepted into the output this step
  // Their ids (n_sampled of them) when the request's tokens are known to the scheduler.
  std::vector<int32_t> sampled;
  bool finished = false;    // stop token or stop string (serving decides)
};

struct StepUpdate {
  // One per plan entry, any order; an entry without one counts as not computed.
  std::vector<RequestResult> requests;
};

}  // namespace ts::sched
