// Requests as the scheduler sees them (counts, and token ids where known: the scheduler
// owns the KV blocks and finds cached prefixes by them), and the decisions it
// makes about them. Every decision carries a Reason, whose name is what the server puts
// in x-tierserve-degraded-reason and in the counters' labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ts::sched {

using RequestId = uint64_t;
// Index of a tier in priority order: 0 is the highest. Scheduler::find_tier maps names.
using TierId = int32_t;

struct Request {
  RequestId id = 0;
  TierId tier = 0;                // requested tier
  int64_t n_prompt_tokens = 1;    // >= 1
  int64_t max_output_tokens = 1;  // >= 1; the request finishes at the latest there
  // Times this request may be preempted; -1: the tier's preemption_budget.
  int32_t preemption_budget = -1;
  // The prompt's token ids (n_prompt_tokens of them), or empty: then its KV is counted
  // but never reused as a cached prefix (scheduler tests plan counts only).
  std::vector<int32_t> tokens;
  uint64_t isolation_key = 0;     // prefixes are reused only under the same key
};

enum class Reason : uint8_t {
  kNone,
  kQueueTimeout,       // waited max_queue_wait_ms without being started
  kPredictedWait,      // at arrival: queue ahead x measured service time > max wait
  kQueueFull,          // the tier's max_queued_requests or max_queued_tokens
  kOverloaded,         // global queue limit, and no lower tier to shed
  kShedForHigherTier,  // global overload: dropped to make room for a higher tier
  kTooLarge,           // prompt + max_output_tokens can never fit the KV cache
  kInvalidRequest,     // unknown tier, empty prompt, zero max_output_tokens
  kKvPressure,         // preempted for a higher tier or a tier below its floor
  kKvExhausted,        // no step possible without it and its preemption budget is spent
  kCancelled,          // by the client (disconnect) or the server
  kEngineError,        // the engine answered kInvalid
  kShutdown,           // the service stopped with the request in flight
  kNotEntitled,        // the key may not use the requested tier (entitlement_move)
};

// snake_case, stable: used in headers and metric labels (the only place it becomes text).
const char* reason_name(Reason r);

// A scheduler decision about one request, in the order they were taken.
enum class EventKind : uint8_t {
  kPromoted,    // to_tier is the tier now serving it (== from_tier: head of its line)
  kDowngraded,  // from_tier -> to_tier
  kRejected,    // ended without being started (admission, timeout, shedding)
  kPreempted,   // its KV was freed; it resumes later by recomputation
  kFinished,    // produced max_output_tokens or was reported finished
  kCancelled,
  kFailed,      // ended with an error after being accepted
};

const char* event_kind_name(EventKind k);

struct Event {
  EventKind kind = EventKind::kFinished;
  RequestId id = 0;
  TierId from_tier = 0;
  TierId to_tier = 0;
  Reason reason = Reason::kNone;
  std::string text;  // for people: what happened, with the numbers
};

// The answer to submit(): accepted (possibly on another tier) or rejected.
struct Decision {
  bool accepted = false;
  TierId tier_requested = 0;
  TierId tier_served = 0;      // differs from tier_requested when downgraded
  Reason reason = Reason::kNone;  // why rejected or downgraded; kNone otherwise
  std::string text;
  // When rejected: 503 for kOverloaded, else 429 (the server decides); a hint in ms.
  int64_t retry_after_ms = 0;
};

}  // namespace ts::sched
