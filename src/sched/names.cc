#include "sched/request.h"

namespace ts::sched {

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::kNone: return "none";
    case Reason::kQueueTimeout: return "queue_timeout";
    case Reason::kPredictedWait: return "predicted_wait";
    case Reason::kQueueFull: return "queue_full";
    case Reason::kOverloaded: return "overloaded";
    case Reason::kShedForHigherTier: return "shed_for_higher_tier";
    case Reason::kTooLarge: return "too_large";
    case Reason::kInvalidRequest: return "invalid_request";
    case Reason::kKvPressure: return "kv_pressure";
    case Reason::kKvExhausted: return "kv_exhausted";
    case Reason::kCancelled: return "cancelled";
    case Reason::kEngineError: return "engine_error";
    case Reason::kShutdown: return "shutdown";
    case Reason::kNotEntitled: return "not_entitled";
  }
  return "unknown";
}

const char* event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::kPromoted: return "promoted";
    case EventKind::kDowngraded: return "downgraded";
    case EventKind::kRejected: return "rejected";
    case EventKind::kPreempted: return "preempted";
    case EventKind::kFinished: return "ok";
    case EventKind::kCancelled: return "cancelled";
    case EventKind::kFailed: return "error";
  }
  return "unknown";
}

}  // namespace ts::sched
