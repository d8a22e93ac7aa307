// The tier-aware scheduler (vLLM v1 style): plain data in, plain data out, no model.
//
//   decision = submit(request, now)       admission: accept, downgrade or reject at once
//   plan     = schedule(now)              timeouts, shares, KV pressure -> counts per request
//   (serving runs the engine step)
//   update(plan, step_update)             what was computed, sampled, finished, refused
//
// Time is passed in (nanoseconds from an injected Clock), so a ManualClock makes every
// decision reproducible: the same calls with the same times give the same plans.
// docs/scheduler.md describes the algorithm and the invariants the tests check.
//
// Not thread-safe: the serving loop's thread owns the scheduler (docs/architecture.md, threads).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_manager.h"
#include "sched/config.h"
#include "sched/plan.h"
#include "sched/request.h"
#include "sched/service_rate.h"
#include "sched/step_cost.h"
#include "sched/tier_policy.h"

namespace ts::sched {

enum class RequestState : uint8_t {
  kQueued,   // waiting: new, or preempted (no KV) and waiting to resume
  kRunning,  // holds KV; advanced whenever its tier's share allows
};

struct RequestInfo {
  TierId tier_requested = 0;
  TierId tier_served = 0;
  RequestState state = RequestState::kQueued;
  bool started = false;        // computed at least one step
  bool promoted = false;       // head of line, exempt from its tier's cap
  int64_t n_computed = 0;
  int64_t n_generated = 0;
  int32_t n_blocks = 0;
  int32_t n_preemptions = 0;
  int64_t arrival_ns = 0;
  // Interrupting tiers: steps carrying other tiers' work that ran (were not interrupted)
  // while this request waited to start, and how many of them were planned after its max
  // wait was over (0 by construction: the plan after a promotion is its own, or it is
  // downgraded there).
  int32_t steps_behind = 0;
  int32_t steps_behind_after_max_wait = 0;
};

class Scheduler {
 public:
  // kInvalidArgument (with the ConfigError's name) for an invalid config.
  static Result<std::unique_ptr<Scheduler>> create(const SchedConfig& cfg);

  const SchedConfig& config() const { return cfg_; }
  int32_t n_tiers() const { return int32_t(tiers_.size()); }
  // Tier by rank (0: highest priority).
  const TierPolicy& tier(TierId t) const { return tiers_[size_t(t)]; }
  std::optional<TierId> find_tier(std::string_view name) const;

  // Admission. Checks, in order: the request itself (kInvalidRequest, kTooLarge), the
  // tier's queue bounds (kQueueFull), the predicted wait against max_queue_wait_ms
  // (kPredictedWait; the tier's on_timeout rule decides: downgrade, reject, or admit when
  // promotion will rescue it), then the global queue bound (lower tiers' waiting requests
  // are shed first, kShedForHigherTier events; else kOverloaded). The decision is only in
  // the return value; requests shed to make room appear in the next plan's events.
  Decision submit(const Request& r, int64_t now_ns);

  // Ends a request wherever it is (kNotFound when unknown or already ended). The caller
  // removes the engine sequence if it had one; a later result for it is ignored.
  Status cancel(RequestId id);

  Plan schedule(int64_t now_ns);

  // Applies the engine's answers to `plan` (the last plan from schedule()). Results for
  // ended (cancelled) requests are ignored. kInvalidArgument when a result names a
  // request that is not in the plan; the other results are still applied.
  Status update(const Plan& plan, const StepUpdate& result);

  // --- queries (per tier) ---
  int32_t queue_depth(TierId t) const { return int32_t(ts_[size_t(t)].queue->size()); }
  int64_t queued_tokens(TierId t) const { return ts_[size_t(t)].queued_tokens; }
  int32_t running(TierId t) const { return int32_t(ts_[size_t(t)].running.size()); }
  int32_t kv_blocks(TierId t) const { return ts_[size_t(t)].kv_held; }
  // Predicted wait of a request of n_prompt tokens arriving now at tier t; nothing until
  // measured. An interrupting tier with a measured step cost: the uninterruptible stretch
  // of the step in flight, plus the work of its own tier ahead of it and its own prompt,
  // at full speed while the tier's windowed share allows and at the tier's measured capped
  // rate beyond, less what its own prompt costs at full speed (that part is compute, not
  // waiting). Other tiers: requests queued ahead over the measured start rate.
  std::optional<int64_t> predicted_wait_ns(TierId t, int64_t n_prompt = 1) const;

  // The step cost model of this machine (the serving layer measures it and keeps it
  // current); unmeasured (the default) turns off what depends on it.
  void set_step_cost(const StepCost& c) { cost_ = c; }
  const StepCost& step_cost() const { return cost_; }
  // The longest a request of interrupting tier t can wait behind other tiers' work once it
  // is admitted and stays on its tier: its max_queue_wait_ms (then it is promoted, and the
  // next step is its own; or, when the window refuses that step, it is downgraded or
  // refused at once, explicitly) plus the step in flight at that moment: one step of the
  // budget (other tiers; uninterruptible when the tier is past its share) or one of the
  // tier's own exclusive steps, which burst() keeps within the max wait. Nothing for other
  // tiers or without a measured cost.
  std::optional<int64_t> wait_bound_ns(TierId t) const;
  // Tokens a tier's running requests and its queue still have to compute before a new
  // request's prompt (prompt chunks, not decodes).
  int64_t prompt_work_ahead(TierId t) const;
  std::optional<RequestInfo> info(RequestId id) const;
  // Accepted requests that have not ended.
  int64_t n_active() const { return int64_t(reqs_.size()); }
  int32_t kv_blocks_available() const { return kv_.n_available(); }
  // The KV blocks: which request holds which, and the prefix cache.
  const kv::KvManager& kv() const { return kv_; }

 private:
  struct Req {
    Request r;
    TierId requested = 0, served = 0;
    RequestState state = RequestState::kQueued;
    bool started = false, promoted = false;
    int64_t arrival_ns = 0, enqueued_ns = 0;
    int64_t n_computed = 0, n_generated = 0;
    int32_t n_blocks = 0, n_preemptions = 0, budget = 0;
    int32_t steps_behind = 0, steps_behind_late = 0;  // RequestInfo::steps_behind*
    int64_t queued_tokens = 0;  // what it adds to its tier's queued_tokens while queued
    bool has_ids = false;       // r.tokens holds the known tokens (prompt, then outputs)
    kv::KvManager::PrefixProbe probe;  // its cached prefix as last matched (prefix_hit)

    int64_t n_known() const { return r.n_prompt_tokens + n_generated; }
    int64_t remaining() const { return n_known() - n_computed; }
  };
  struct TierState {
    std::unique_ptr<QueuePolicy> queue;
    std::vector<RequestId> running;  // in start order
    int64_t queued_tokens = 0;
    int32_t kv_held = 0;
    ServiceRate rate;
    int32_t n_started = 0;           // since the previous schedule()
    bool backlogged = false;         // had waiting requests after the previous plan
    // Interrupting tiers: prompt tokens computed per second while the tier was past its
    // share (no exclusive step allowed) with prompt work left: its rate "at its share".
    ServiceRate capped_rate;
    int64_t n_tokens = 0;            // prompt tokens computed since the previous schedule()
    bool capped = false;             // the previous plan found it past its share, with work left
  };
  struct Candidate;
  struct StepCtx;

  explicit Scheduler(const SchedConfig& cfg);

  void enqueue(Req& q, TierId t, bool at_head, int64_t now_ns);
  void dequeue(Req& q);
  void end(RequestId id, EventKind kind, Reason reason, std::string text);
  void emit(EventKind kind, const Req& q, TierId from, Reason reason, std::string text);

  void apply_timeouts(int64_t now_ns);
  void observe_service_rates(int64_t now_ns);
  bool shed_for(TierId t, int64_t n_prompt);
  void collect_candidates(StepCtx& c);
  void pack(StepCtx& c);
  void burst(StepCtx& c);
  void record_window(const StepCtx& c);
  void unrecord_window(TierId t, int64_t n_tokens);
  bool may_run_exclusive(TierId t, int64_t budget) const;
  void make_exclusive(StepCtx& c);
  bool floors_allow_exclusive(const StepCtx& c) const;
  const StepCost& floor_cost() const;
  double tokens_cost_ns(const Candidate& cand, int64_t n) const;
  int64_t place(StepCtx& c, Candidate& cand, int64_t n_tokens, bool may_preempt);
  bool preempt_for(StepCtx& c, Req& for_req, int64_t n_blocks);
  int64_t reserve_need(const Req& r, int64_t planned, int64_t blocks) const;
  int64_t growth_reserve(const StepCtx& c, const Req& except) const;
  void preempt(StepCtx& c, Req& q, Reason reason);
  bool attach_prefix(StepCtx& c, Candidate& cand);
  void detach_prefix(StepCtx& c, Candidate& cand);
  int64_t prefix_hit(Req& q) const;
  void break_deadlock(StepCtx& c);
  void finish_plan(StepCtx& c, Plan& plan);
  int32_t kv_in_use() const;

  SchedConfig cfg_;
  std::vector<TierPolicy> tiers_;
  std::vector<TierState> ts_;
  std::unordered_map<RequestId, Req> reqs_;  // lookup only; order lives in queues/lists
  std::vector<Event> events_;                // for the next plan
  int64_t step_ = 0;
  int64_t last_now_ns_ = -1;
  kv::KvManager kv_;
  // Tokens planned per tier in each of the last share_window_steps plans (a ring), and
  // their sums per tier: what a bursting tier's share_max is checked against.
  std::vector<std::vector<int64_t>> window_;
  size_t window_pos_ = 0;
  std::vector<int64_t> window_sum_;
  // Per tier and plan of the window, in floor_cost() nanoseconds: the part of the step's
  // time it received, and what its floor was owed (floors_allow_exclusive), with sums.
  std::vector<std::vector<int64_t>> window_got_, window_owed_;
  std::vector<int64_t> window_got_sum_, window_owed_sum_;
  // Which of those plans were exclusive (Plan::exclusive), and how many.
  std::vector<bool> window_exclusive_;
  int32_t n_exclusive_ = 0;
  StepCost cost_;
};

}  // namespace ts::sched
