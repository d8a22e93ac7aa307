// Tier configuration: plain structs with a default for every field. The YAML reader comes
// with the server; here a config is built in code (tests) and validated with typed errors.
//
// Units: shares are fractions of the per-step token budget and of the KV blocks (both
// use the same share_min/share_max); times are milliseconds; queues count requests and
// prompt tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ts::sched {

// What happens to a request that waited max_queue_wait_ms without being started (and,
// at arrival, to a request whose predicted wait already exceeds it).
enum class TimeoutAction : uint8_t {
  kPromote,    // top tier: head of its line, exempt from its cap; else: next tier up
  kDowngrade,  // to `target`, a lower tier (its own timeout rule applies from then on)
  kReject,     // explicit error to the client
};

struct OnTimeout {
  TimeoutAction action = TimeoutAction::kReject;
  std::string target;  // tier name, for kDowngrade only

  bool operator==(const OnTimeout&) const = default;
};

// "promote" | "reject" | "downgrade:<tier>"; kInvalidArgument otherwise.
Result<OnTimeout> parse_on_timeout(std::string_view s);
std::string to_string(const OnTimeout& t);

// What happens at arrival to a request whose predicted wait already exceeds its tier's
// max_queue_wait_ms. kFollowTimeout: what the tier's on_timeout does there (downgrade and
// reject act at once; promote admits, trusting promotion to rescue the request).
enum class PredictedWaitAction : uint8_t { kFollowTimeout, kAdmit, kDowngrade, kReject };

struct OnPredictedWait {
  PredictedWaitAction action = PredictedWaitAction::kFollowTimeout;
  std::string target;  // tier name, for kDowngrade only

  bool operator==(const OnPredictedWait&) const = default;
};

// "admit" | "reject" | "downgrade:<tier>"; kInvalidArgument otherwise.
Result<OnPredictedWait> parse_on_predicted_wait(std::string_view s);
std::string to_string(const OnPredictedWait& t);  // "" for kFollowTimeout

// Queue order within a tier (sched/queue_policy.h).
enum class QueueKind : uint8_t { kFcfs, kShortestPromptFirst };
Result<QueueKind> parse_queue_kind(std::string_view s);  // "fcfs" | "shortest_prompt_first"

struct TierConfig {
  std::string name;
  int32_t priority = 0;        // 0 is served first; must be unique
  double share_min = 0.0;      // floor, reserved whenever the tier has demand
  double share_max = 1.0;      // cap while other tiers have demand
  bool borrow = false;         // may exceed share_max with capacity others leave idle
  int64_t max_queue_wait_ms = 5000;  // 0: no limit
  OnTimeout on_timeout;
  // At arrival, a predicted wait above max_queue_wait_ms (docs/scheduler.md, admission):
  // for a latency tier the wait behind its own tier at the share it gets now, so that a
  // request beyond the tier's share is told at once instead of silently slowed.
  OnPredictedWait on_predicted_wait;
  int32_t max_queued_requests = 1024;
  int64_t max_queued_tokens = int64_t(1) << 22;
  int32_t max_batch = 256;     // requests of this tier in one step
  bool speculative = false;    // passed through to the plan; the serving layer drafts
  int32_t preemption_budget = 4;  // times one request may be preempted
  // Latency tiers: tokens this tier may compute in a step ON TOP of the shared step
  // budget (its prompt runs in one step instead of many capped chunks), as long as its
  // tokens over the last share_window_steps steps stay within share_max x budget x steps
  // (its cap, enforced on average rather than per step).
  // The budget bounds how long a step of the other tiers takes (what a new request of
  // this tier waits for); the burst bounds how long its own prefill takes. 0: off. -1:
  // derived by the serving layer from the measured step cost (the prompt tokens one step
  // computes in max_queue_wait_ms, beyond the budget: so that one exclusive step never
  // holds the tier's next request past its max wait); Scheduler::create needs it resolved.
  int64_t burst_tokens = 0;
  // Latency tiers: a new request of this tier interrupts the step in flight (the engine
  // abandons it at the next layer boundary; it is planned again), and while such a
  // request has prompt left, steps carry only the work of interrupting tiers. Exclusive
  // steps are limited to share_max of the share_window_steps window (and to the burst
  // allowance when burst_tokens > 0), so the other tiers' floors hold over the window
  // rather than in every step.
  bool interrupt = false;
  QueueKind queue = QueueKind::kFcfs;
};

struct SchedConfig {
  // Any order; the scheduler sorts them by priority.
  std::vector<TierConfig> tiers;
  // Tokens computed per engine step, all tiers together. One layer of a step is what a
  // newly arrived request of an interrupting tier waits for at most. 0: derived by the
  // serving layer from the measured step cost (the largest power of two from 16 to 512
  // whose layer takes at most max_segment_ms); Scheduler::create needs it resolved.
  int64_t step_token_budget = 64;
  // With step_token_budget 0: the longest stretch of an interruptible step (one layer of a
  // full step) allowed, in milliseconds.
  double max_segment_ms = 10.0;
  int64_t max_chunk_tokens = 0;     // per request and step; 0: the whole budget
  // Steps over which a bursting tier's share_max is enforced (TierConfig::burst_tokens).
  int32_t share_window_steps = 64;
  // The KV pool the scheduler allocates from: the engine's KV tensors' blocks (the
  // serving layer copies EngineOptions/kv_stats), and its prefix cache.
  int32_t kv_blocks_total = 1024;
  int32_t kv_block_size = 16;
  bool prefix_cache = true;
  bool share_prefixes = false;  // reuse prefixes across isolation keys
  // Global overload: beyond these, the lowest tier is shed first.
  int32_t max_queued_requests_total = 4096;
  int64_t max_queued_tokens_total = int64_t(1) << 24;
  // Time constant of the measured per-tier start rate that predicts waits at admission.
  int64_t service_rate_window_ms = 2000;
  // A queued request starts only if the running ones keep room to grow by this many
  // tokens each (their growth reserve); 0: one block (kv_block_size).
  int64_t kv_reserve_tokens = 0;
};

// ultrafast (share_max 0.3, borrow, bursts of 512 tokens, 200 ms -> promote, a predicted
// wait above 200 ms at arrival -> downgrade:standard), standard (share_min 0.5, 5 s ->
// reject, max_batch 16), batch (share_min 0.05, 10 min -> reject, max_batch 16).
SchedConfig default_config();

enum class ConfigErrorCode : uint8_t {
  kNoTiers,
  kEmptyName,
  kDuplicateName,
  kDuplicatePriority,
  kShareOutOfRange,        // share_min or share_max outside [0, 1]
  kShareMinAboveMax,
  kShareMinSumAboveOne,
  kUnknownDowngradeTarget,
  kDowngradeNotLower,      // target is not of lower priority
  kDowngradeCycle,
  kBadLimit,               // a count, budget, size or alpha out of range
  kCapBelowOneToken,       // a tier that does not borrow is capped at 0 tokens per step
};

const char* config_error_name(ConfigErrorCode c);

struct ConfigError {
  ConfigErrorCode code;
  std::string tier;        // the tier at fault; empty for global fields
  std::string message;

  Status to_status() const;  // kInvalidArgument with "<code>: <tier>: <message>"
};

// The first problem found, or nothing when the config is usable.
std::optional<ConfigError> check_config(const SchedConfig& cfg);
inline Status validate_config(const SchedConfig& cfg) {
  auto e = check_config(cfg);
  return e ? e->to_status() : Status::ok();
}

}  // namespace ts::sched
