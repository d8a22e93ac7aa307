// The serving layer: one engine-loop thread that owns the Engine and the Scheduler, and a
// thread-safe front (submit / cancel / drain) that HTTP threads call. Everything crosses
// between them by message (docs/architecture.md, threads): submit() puts the request in an inbox, the
// loop admits it at its next iteration, and every later event of the request comes back
// through the request's callback, called on the loop thread, in order.
//
//   loop:  inbox (new, cancel) -> scheduler.submit/cancel
//          plan = scheduler.schedule(now) (allocates the KV blocks) -> add -> engine.step
//          -> sample, detokenize, stop strings -> callbacks -> scheduler.update
//
// HTTP threads tokenize and render chat templates (tokenizer() and chat_template() are
// const and thread-safe); the loop detokenizes (StreamDecoder) and checks stop strings,
// because it decides when a request ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "metrics/registry.h"
#include "sched/config.h"
#include "sched/request.h"
#include "sched/step_cost.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ts::serving {

using RequestId = uint64_t;

struct ServiceOptions {
  engine::EngineOptions engine;   // KV budget, block size, max_seq_len, prefix cache
  sched::SchedConfig sched;       // tiers; kv_blocks_* are taken from the engine
  // Tiers off (the isolation experiment's control): every request goes to one FIFO queue
  // of the first tier's limits, but keeps its tier label in responses and metrics.
  bool fifo = false;
  // Cap on max_tokens of one request (0: max_seq_len - prompt).
  int64_t max_output_tokens = 0;
  // How long the loop sleeps when it has no work (it wakes at once on submit/cancel).
  int64_t idle_poll_ms = 50;
  // Speculative decoding for tiers with `speculative: true`: prompt-lookup drafts
  // (serving/draft.h) of at most spec_max_drafts tokens per step (0: off), found by
  // looking up the last spec_max_ngram..spec_min_ngram tokens earlier in the request.
  int32_t spec_max_drafts = 4;
  int32_t spec_max_ngram = 3;
  int32_t spec_min_ngram = 2;
  // The step cost model (sched/step_cost.h). Measured given: used as is (tests). Else, with
  // `calibrate` and the real clock, create() measures it on the engine (~a second on a
  // slow CPU), and the loop keeps it current from the steps it runs. It derives
  // sched.step_token_budget 0 and the interrupting tiers' wait bound, and predicts their
  // waits at admission.
  sched::StepCost step_cost;
  bool calibrate = true;
  // A request not started yet gets a kWaiting update this often (streams keep a proxy's
  // idle timeout from cutting them: the server writes an SSE comment). 0: never.
  int64_t wait_notice_ms = 10000;
};

struct GenerateRequest {
  // The tier's rank in sched_config().tiers (priority order, 0 first); the server maps
  // service_tier to it. Names exist only at the HTTP edge and in metric labels.
  sched::TierId tier = 0;
  std::vector<int32_t> prompt;      // token ids, tokenized by the caller; >= 1 token
  int64_t max_tokens = 16;          // >= 1; capped at max_seq_len - prompt ("length")
  engine::SamplingParams sampling;
  std::vector<std::string> stop;    // stop strings (the text returned excludes them)
  bool ignore_eos = false;
  uint64_t isolation_key = 0;       // prefix-cache isolation (a hash of the API key)
  // Log-probabilities of the generated tokens: -1 off; else also this many most likely
  // alternatives per token (0..20), from the model's distribution (before sampling
  // parameters other than the logits themselves).
  int32_t logprobs = -1;
  int32_t preemption_budget = -1;   // -1: the tier's
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0; // reused from the prefix cache
};

struct Timings {
  int64_t queue_ns = 0;             // arrival (submit) -> first step that computed it
  int64_t ttft_ns = 0;              // arrival -> first generated token
  int64_t e2e_ns = 0;               // arrival -> end
  int32_t n_preemptions = 0;
  // Interrupting tiers (-1 otherwise): steps with other tiers' work it waited through
  // before it started, and of those the ones planned after its max wait (0 by construction).
  int32_t steps_behind = -1;
  int32_t steps_behind_after_max_wait = -1;
};

// The log-probability of one generated token, and the most likely alternatives (highest
// first) when asked for. `token` is the token's text piece (bytes; may be part of a UTF-8
// character).
struct TokenLogprob {
  struct Alt {
    std::string token;
    float logprob = 0;
  };
  std::string token;
  float logprob = 0;
  std::vector<Alt> top;
};

// One event of a request, delivered to its callback on the loop thread.
struct Update {
  enum class Kind : uint8_t {
    kAdmitted,     // first update: accepted (maybe on another tier) or rejected (final)
    kTierChanged,  // promoted or downgraded while queued
    kPreempted,    // KV freed for a higher tier; resumes later (latency only)
    kWaiting,      // still queued: every ServiceOptions::wait_notice_ms until it starts
    kDelta,        // new text (UTF-8 complete, stop strings held back) and token count
    kDone,         // final: finish_reason "stop" (EOS or stop string) or "length"
    kFailed,       // final: accepted but ended with an error (reason says why):
                   // kCancelled, kShutdown, kQueueTimeout, kShedForHigherTier,
                   // kKvExhausted, kEngineError
  };
  Kind kind = Kind::kDelta;
  RequestId id = 0;

  // Every update: the tiers by rank (sched_config().tiers). kAdmitted / kTierChanged /
  // kPreempted / kFailed: why (kNone if nothing to say; the HTTP edge turns it into text
  // with sched::reason_name and into a status). A refused kAdmitted is final; requests
  // still waiting for admission at shutdown() are refused with kOverloaded.
  bool accepted = false;
  sched::TierId tier_requested = -1;
  sched::TierId tier_served = -1;
  sched::Reason reason = sched::Reason::kNone;
  std::string message;              // for people, e.g. "predicted wait 7.2 s > 5 s"
  int64_t retry_after_ms = 0;       // rejected: a hint

  // kDelta
  std::string text;
  int32_t n_tokens = 0;
  // kDelta and kDone, when the request asked for logprobs: one entry per token since the
  // previous update that carried them (a delta whose text is held back carries none).
  std::vector<TokenLogprob> logprobs;

  // kDone / kFailed
  std::string finish_reason;        // kDone
  Usage usage;
  Timings timings;
};

using Callback = std::function<void(const Update&)>;

struct Stats {
  bool draining = false;
  int64_t n_active = 0;             // accepted, not yet ended
  int64_t n_steps = 0;
  int64_t n_interrupted = 0;        // steps abandoned for an interrupting tier's arrival
  int64_t n_drafted = 0;            // speculative draft tokens verified
  int64_t n_draft_accepted = 0;     // of which accepted (each saved a step)
  int64_t n_engine_seqs = 0;        // sequences the engine holds (active ones only)
  int64_t n_running = 0;            // requests holding KV (the rest of n_active waits)
  int64_t n_forced_exclusive = 0;   // steps a promoted fast request took past the window's limits
  engine::KvStats kv;               // as of the loop's last iteration
  sched::StepCost step_cost;        // the current model (calibration x step_cost_scale)
  double step_cost_scale = 1.0;     // measured / calibrated step times, smoothed
  int64_t step_token_budget = 0;    // as resolved at create()
  // Per interrupting tier: the longest an admitted request waits behind other tiers
  // (sched::Scheduler::wait_bound_ns), with the current cost model.
  std::vector<std::pair<sched::TierId, int64_t>> wait_bound_ns;
};

class Service {
 public:
  // Loads nothing: `model` and `tokenizer` are owned by the caller and outlive the
  // service. Starts the loop thread. kInvalidArgument for a bad config.
  static Result<std::unique_ptr<Service>> create(engine::Model& model, const tok::Tokenizer& tokenizer,
                                                 const tok::ChatTemplate& chat, const ServiceOptions& opts,
                                                 metrics::Registry* metrics, const Clock* clock = nullptr);
  ~Service();  // shutdown()

  // Validates what can be checked without the loop (unknown tier, empty prompt, prompt
  // over the context -> kOutOfRange "context_length_exceeded", bad sampling, draining ->
  // kUnavailable) and queues the request. The callback then gets kAdmitted first and,
  // if accepted, exactly one final kDone or kFailed. It must not block.
  Result<RequestId> submit(GenerateRequest req, Callback cb);
  // Ends the request within one step (client disconnect). Its callback gets a final
  // kFailed with reason "cancelled" unless it already got its final update.
  void cancel(RequestId id);

  // No new requests (submit -> kUnavailable); in-flight ones continue.
  void begin_drain();
  // Waits until no request is active or the deadline passes; true when idle.
  bool wait_idle(int64_t timeout_ms);
  // Cancels what is left and stops the loop thread. Idempotent.
  void shutdown();

  Stats stats() const;
  const tok::Tokenizer& tokenizer() const;
  const tok::ChatTemplate& chat_template() const;
  const engine::Model& model() const;
  const sched::SchedConfig& sched_config() const;  // the tiers in priority order
  int64_t max_seq_len() const;

 private:
  struct Impl;
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts::serving
