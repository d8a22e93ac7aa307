// The fleet's tiers: which worker a request goes to, and when. No sockets and no threads
// of its own (tested with a manual clock): the gateway submits tickets, says when a placed
// request ended, reports worker health and load, and calls tick() every few milliseconds.
//
// Slots. A worker takes at most max_inflight requests from the gateway at once; the rest
// wait here, one queue per tier and model. A pool's capacity for a model is the slots of
// its workers of that model that are up; floors, caps and borrowing are counted per pool and
// model.
//
// Placement, whenever a slot frees or a ticket arrives: the queue heads in order — tiers
// below their floor on their own pool first (share_min of its slots, rounded down to whole
// slots), then by tier order
// (promoted tickets first within a tier), then by arrival — each placed on the least loaded
// worker with a free slot that serves its model (ties taken in turn):
//   1. in the tier's pools, in order (a pool after the first is a pool fallback, said in
//      the placement), within its cap there (share_max of the pool's slots while another
//      tier that uses the pool has requests waiting; a promoted ticket is exempt);
//   2. else in a pool it may borrow, only while the pool is idle: no request of a tier that
//      owns the pool is in flight on that worker or waiting, and only on workers that honour
//      request priorities (tierserve, vLLM), so that a fast arrival is never held behind a
//      borrowed request: an owner tier's ticket does not count the borrowed requests on a
//      worker against its slots (up to twice max_inflight), and the worker's own scheduler
//      puts it first;
//   3. else, with a fallback model configured (router on_saturated: fallback), the same
//      for the fallback model (a model fallback, said in the placement).
// At its tier's max wait a ticket is promoted (to the head of its line, past the cap),
// downgraded to a later tier (said), or refused (queue_timeout). A ticket that no worker
// that is up could ever serve is refused at once (503 no_healthy_worker), as are those
// queued when the last such worker goes down. Load: the larger of the gateway's in-flight
// count and the worker's own running + waiting, over its slots, plus its KV usage.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "gateway/config.h"

namespace ts::gateway {

struct FleetWorker {
  std::string name;
  int pool = 0;                 // index into Fleet::pools()
  int model = 0;                // index into the models list
  bool honours_priority = true;
  int32_t max_inflight = 1;
};

struct WorkerLoad {
  bool up = false;
  double waiting = 0, running = 0;  // the worker's own gauges (0 when it has none)
  double kv_usage = 0;              // 0..1
};

enum class Refusal : uint8_t { kQueueFull, kQueueTimeout, kNoHealthyWorker, kCancelled };
std::string_view refusal_code(Refusal r);  // queue_full, queue_timeout, no_healthy_worker, cancelled
int refusal_status(Refusal r);             // 429, 429, 503, 499

struct Placement {
  uint64_t ticket = 0;
  int worker = -1;
  int tier = -1;                // the tier it is served on
  int model = -1;               // the model that serves it
  int pool = -1;
  bool borrowed = false;        // on a pool its tier only borrows
  bool pool_fallback = false;   // not its tier's first pool
  bool model_fallback = false;  // the fallback model
  bool promoted = false;        // placed after its tier's max wait
  int64_t queue_ns = 0;
};

struct Ticket {
  int tier = 0;
  int model = 0;
  int fallback_model = -1;      // >= 0: may be served by this model when `model` is saturated
  int exclude_worker = -1;      // a retry: not on this worker
  bool at_head = false;         // a retry goes first in its line
  std::function<void(const Placement&)> on_start;
  std::function<void(Refusal, const std::string& message)> on_refused;
  std::function<void(int from_tier, int to_tier, const std::string& reason)> on_tier_changed;
};

struct FleetTier {
  std::string name;
  std::vector<int> pools, borrow;  // pool indices
  double share_min = 0, share_max = 1;
  int64_t max_wait_ns = 0;
  OnTimeout on_timeout = OnTimeout::kReject;
  int downgrade_to = -1;
  int32_t max_queued = 4096;
  bool hard_cap = false;           // share_max holds even while nobody else waits (shadow traffic)
};

class Fleet {
 public:
  Fleet(std::vector<std::string> pools, std::vector<FleetTier> tiers, std::vector<FleetWorker> workers, int n_models,
        const Clock& clock);

  struct Submitted {
    bool accepted = false;
    uint64_t id = 0;
    Refusal why = Refusal::kQueueFull;
    std::string message;
  };
  // Queues the ticket (its on_start may run before this returns, from this thread) or
  // refuses it (the callbacks are not called then).
  Submitted submit(Ticket t);
  // A placed request ended: its slot frees.
  void finished(uint64_t id);
  // A queued ticket leaves (the client went away): true; false when it was placed already
  // or is unknown. Its callbacks are not called.
  bool cancel(uint64_t id);
  void set_load(int worker, const WorkerLoad& l);
  // Timeouts; placements that became possible.
  void tick();

  // For metrics and /admin/stats.
  int n_tiers() const { return int(tiers_.size()); }
  const std::vector<std::string>& pools() const { return pools_; }
  const std::vector<FleetWorker>& workers() const { return workers_; }
  std::vector<int64_t> queued_per_tier() const;
  std::vector<int64_t> inflight_per_worker() const;
  std::vector<bool> up_per_worker() const;
  int64_t n_queued() const;
  int64_t n_inflight() const;

 private:
  struct Queued {
    uint64_t id;
    Ticket t;
    int64_t enqueued_ns, tier_since_ns;
    bool promoted = false;
  };
  struct Running {
    int worker, tier, pool;
    bool borrowed;
  };
  struct WorkerState {
    WorkerLoad load;
    int32_t inflight = 0, borrowed = 0;
    std::vector<int32_t> by_tier;
  };
  using Actions = std::vector<std::function<void()>>;

  std::deque<Queued>& line(int tier, int model) { return lines_[size_t(tier) * size_t(n_models_) + size_t(model)]; }
  bool owns(int tier, int pool) const;
  bool pool_has_owner_demand(int pool, int except_tier, int model) const;
  int32_t capacity(int pool, int model) const;
  int32_t tier_inflight(int tier, int pool, int model) const;
  bool can_ever_serve(const Ticket& t) const;
  static int32_t floor_slots(double share, int32_t cap);
  double score(int w) const;
  // The best worker for the ticket on `pool` for `model`, or -1.
  int pick(const Queued& q, int tier, int pool, int model, bool borrowing) const;
  bool try_place(Queued& q, int tier, Actions& out);
  void place_all(Actions& out);
  void refuse_unservable(Actions& out);
  static void run(Actions& a) {
    for (auto& f : a) f();
  }

  std::vector<std::string> pools_;
  std::vector<FleetTier> tiers_;
  std::vector<FleetWorker> workers_;
  int n_models_;
  const Clock& clock_;
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;                                // GUARDED_BY(mu_)
  size_t rotation_ = 0;                                 // GUARDED_BY(mu_): where pick() starts
  std::vector<std::deque<Queued>> lines_;               // GUARDED_BY(mu_), per (tier, model)
  std::map<uint64_t, Running> running_;                 // GUARDED_BY(mu_)
  std::vector<WorkerState> ws_;                         // GUARDED_BY(mu_)
};

}  // namespace ts::gateway
