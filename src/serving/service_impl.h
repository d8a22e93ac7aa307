// Service internals shared by service.cc (the thread-safe front: validation, inbox,
// drain, shutdown) and loop.cc (the engine-loop thread). Private to the layer.
#pragma once

#include <functional>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "request_state.h"
#include "sched/scheduler.h"
#include "serving/service.h"
#include "service_metrics.h"
#include "step_cost.h"

namespace ts::serving {

struct Service::Impl {
  Impl(engine::Model& m, const tok::Tokenizer& t, const tok::ChatTemplate& c, const ServiceOptions& o,
       metrics::Registry* reg, const Clock* clk, std::vector<std::string> names)
      : model(m), tok(t), chat(c), opts(o), clock(clk ? clk : &steady), tier_names(std::move(names)),
        metrics(reg, tier_names) {}

  // --- immutable after create() ------------------------------------------------------
  engine::Model& model;
  const tok::Tokenizer& tok;
  const tok::ChatTemplate& chat;
  ServiceOptions opts;
  SteadyClock steady;
  const Clock* clock;
  sched::SchedConfig tiers_cfg;         // as configured (tiers in priority order), KV from the engine
  std::vector<std::string> tier_names;  // priority order; the labels of responses and metrics
  int64_t max_seq_len = 0;
  int64_t n_vocab = 0;
  std::vector<bool> interrupting;  // by tier: its arrivals interrupt a step (never in FIFO mode)

  // Raised by submit() for an interrupting tier, cleared by the loop when it takes the
  // inbox; the engine watches it during interruptible steps.
  std::atomic<bool> interrupt{false};

  // --- owned by the loop thread ------------------------------------------------------
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<sched::Scheduler> sched;
  ServiceMetrics metrics;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> reqs;  // admitted, not ended
  std::optional<StepCostTracker> cost;  // the calibration, corrected by every step

  // --- shared between the front and the loop, GUARDED_BY(mu) -------------------------
  struct Pending {
    RequestId id = 0;
    GenerateRequest req;
    Callback cb;
    int64_t max_tokens = 0;
    int64_t arrival_ns = 0;
  };
  mutable std::mutex mu;
  std::condition_variable wake;   // the loop sleeps on it
  std::condition_variable idle;   // wait_idle() sleeps on it
  std::vector<Pending> inbox;
  std::vector<RequestId> cancels;
  bool draining = false;
  bool stopping = false;
  bool stopped = false;
  int64_t n_active = 0;           // submitted, no final update yet (inbox included)
  RequestId next_id = 1;
  int64_t n_steps = 0;
  int64_t n_interrupted = 0;
  int64_t n_drafted = 0, n_draft_accepted = 0;
  int64_t n_engine_seqs = 0;
  int64_t n_running = 0;
  int64_t n_forced_exclusive = 0;
  engine::KvStats kv;
  sched::StepCost cost_now;       // cost->current(), and what it implies, for stats()
  double cost_scale = 1.0;
  std::vector<std::pair<sched::TierId, int64_t>> wait_bounds;
  std::thread thread;

  // --- loop.cc -------------------------------------------------------------------------
  void run();
  // One plan -> step -> update; false when nothing could be computed.
  bool step_once();
  struct Translated {
    engine::StepPlan sp;
    std::vector<const sched::PlanEntry*> planned;  // the entry of each sp.seqs[i]
    double step_pairs = 0;                         // attention pairs (for the cost model)
  };
  // Requests that end in a step end after the scheduler's update, which frees their
  // blocks: whoever sees a request end (wait_idle, stats) sees its KV released.
  using Ends = std::vector<std::function<void()>>;
  Translated translate(const sched::Plan& plan, sched::StepUpdate& up, Ends& ends);
  void apply_result(const sched::PlanEntry& e, const engine::SeqStep& ss, const engine::SeqResult& sr, int64_t now,
                    int64_t t_done, std::vector<int64_t>& tokens_by_label, sched::StepUpdate& up, Ends& ends);
  void add_drafts(RequestState& r, const sched::PlanEntry& e, engine::SeqStep& s);
  // The KV pool as the scheduler (its owner) sees it, with the engine's tensor bytes.
  engine::KvStats kv_snapshot() const;
  void adapt_drafts(RequestState& r, int64_t drafted, int64_t accepted);
  TokenLogprob token_logprob(const engine::OutputLogprob& lp) const;
  void admit(std::vector<Pending>& in);
  void apply_cancels(const std::vector<RequestId>& ids);
  void apply_events(const sched::Plan& plan);
  void notify_waiting();
  void publish();
  // Copies the cost model and the wait bounds it implies for stats() (under mu).
  void publish_cost();
  // The per-tier gauges (queued, running, KV blocks) from the scheduler's view of the
  // live requests, and each tier's share of the step's tokens (tokens_by_label; null when
  // no step ran: the shares of the last step stay).
  void tier_gauges(const std::vector<int64_t>* tokens_by_label, double step_tokens);
  void shutdown_all(std::vector<Pending>& in);

  // Helpers.
  RequestState* find(RequestId id);
  void deliver(RequestState& r, const Update& u);
  // Delivers the final update, frees the engine sequence and forgets the request.
  void end(RequestId id, Update u);
  void end_failed(RequestId id, Outcome outcome, sched::Reason reason, const std::string& message);
  void end_done(RequestState& r, EndKind why);
  void release_active(int64_t n);
};

}  // namespace ts::serving
