// Service: the thread-safe front. create() builds the engine and the scheduler, submit()
// validates and queues, cancel()/drain/shutdown signal the loop (loop.cc), which owns
// everything else.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "service_impl.h"
#include "step_cost.h"

namespace ts::serving {

namespace {

// The scheduler config of FIFO mode (tiers off): one queue with the first tier's limits,
// first come first served, the whole budget. A downgrade has nowhere to go in one tier,
// so it becomes a reject; promotion to the head of the one line would reorder it (the
// latest promoted first), so a promoting tier's wait limit is dropped.
sched::SchedConfig fifo_config(const sched::SchedConfig& cfg) {
  sched::SchedConfig f = cfg;
  sched::TierConfig t = cfg.tiers.front();
  t.priority = 0;
  t.share_min = 0.0;
  t.share_max = 1.0;
  t.borrow = true;
  t.queue = sched::QueueKind::kFcfs;
  if (t.on_timeout.action == sched::TimeoutAction::kDowngrade) t.on_timeout = sched::OnTimeout{};
  if (t.on_predicted_wait.action == sched::PredictedWaitAction::kDowngrade) t.on_predicted_wait = {sched::PredictedWaitAction::kReject, ""};
  if (t.on_timeout.action == sched::TimeoutAction::kPromote) t.max_queue_wait_ms = 0;
  int32_t max_batch = 0;
  for (const sched::TierConfig& u : cfg.tiers) max_batch = std::max(max_batch, u.max_batch);
  t.max_batch = max_batch;
  f.tiers = {t};
  return f;
}

}  // namespace

Result<std::unique_ptr<Service>> Service::create(engine::Model& model, const tok::Tokenizer& tokenizer,
                                                 const tok::ChatTemplate& chat, const ServiceOptions& opts,
                                                 metrics::Registry* metrics, const Clock* clock) {
  if (opts.idle_poll_ms < 1) return invalid_argument("idle_poll_ms must be >= 1");
  if (opts.max_output_tokens < 0) return invalid_argument("max_output_tokens must be >= 0");
  if (opts.spec_max_drafts < 0 || opts.spec_max_drafts > 64 || opts.spec_min_ngram < 1 ||
      opts.spec_max_ngram < opts.spec_min_ngram)
    return invalid_argument("speculative: max_drafts in [0, 64], 1 <= min_ngram <= max_ngram");
  if (opts.sched.tiers.empty()) return invalid_argument("no_tiers: at least one tier is needed");

  // The scheduler owns the KV blocks (it allocates while planning); the engine maps them.
  engine::EngineOptions eo = opts.engine;
  eo.external_kv = true;
  auto engine = engine::Engine::create(model, eo);
  if (!engine.is_ok()) return engine.status();
  const engine::KvStats kv = (*engine)->kv_stats();

  // The step cost of this machine: given, or measured on the engine (only with the real
  // clock: a test's manual clock would not see those nanoseconds pass).
  sched::StepCost cost = opts.step_cost;
  if (!cost.measured() && opts.calibrate && clock == nullptr)
    cost = measure_step_cost(**engine, int32_t(model.config().n_layer), model.config().n_vocab);

  sched::SchedConfig cfg = opts.sched;
  cfg.kv_blocks_total = kv.total;
  cfg.kv_block_size = kv.block_size;
  cfg.prefix_cache = eo.prefix_cache;
  cfg.share_prefixes = eo.share_prefixes;
  if (cfg.step_token_budget == 0)
    cfg.step_token_budget = derive_step_budget(cost, cfg.max_segment_ms, (*engine)->options().max_step_tokens);
  for (sched::TierConfig& t : cfg.tiers)
    if (t.burst_tokens < 0) t.burst_tokens = derive_burst_tokens(cost, t.max_queue_wait_ms, cfg.step_token_budget);
  std::stable_sort(cfg.tiers.begin(), cfg.tiers.end(),
                   [](const sched::TierConfig& a, const sched::TierConfig& b) { return a.priority < b.priority; });
  TS_RETURN_IF_ERROR(sched::validate_config(cfg));
  auto sched = sched::Scheduler::create(opts.fifo ? fifo_config(cfg) : cfg);
  if (!sched.is_ok()) return sched.status();

  std::vector<std::string> names;
  for (const sched::TierConfig& t : cfg.tiers) names.push_back(t.name);
  auto impl = std::make_unique<Impl>(model, tokenizer, chat, opts, metrics, clock, std::move(names));
  impl->tiers_cfg = cfg;
  impl->engine = std::move(engine).value();
  impl->sched = std::move(sched).value();
  impl->sched->set_step_cost(cost);
  impl->cost.emplace(cost);
  impl->publish_cost();
  impl->max_seq_len = impl->engine->max_seq_len();
  impl->n_vocab = model.config().n_vocab;
  impl->kv = kv;
  for (const sched::TierConfig& t : cfg.tiers) impl->interrupting.push_back(!opts.fifo && t.interrupt);
  impl->engine->set_interrupt_flag(&impl->interrupt);
  Impl* p = impl.get();
  std::unique_ptr<Service> svc(new Service(std::move(impl)));
  p->thread = std::thread([p] { p->run(); });
  return svc;
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Service::~Service() { shutdown(); }

Result<RequestId> Service::submit(GenerateRequest req, Callback cb) {
  Impl& m = *impl_;
  if (req.tier < 0 || size_t(req.tier) >= m.tier_names.size())
    return invalid_argument("unknown tier " + std::to_string(req.tier) + " (the service has " +
                            std::to_string(m.tier_names.size()) + ")");
  if (req.prompt.empty()) return invalid_argument("empty prompt");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= m.n_vocab)
      return invalid_argument("token id " + std::to_string(t) + " out of range [0, " + std::to_string(m.n_vocab) + ")");
  const int64_t n_prompt = int64_t(req.prompt.size());
  if (n_prompt + 1 > m.max_seq_len)
    return out_of_range("context_length_exceeded: prompt of " + std::to_string(n_prompt) +
                        " tokens leaves no room for output in the context of " + std::to_string(m.max_seq_len));
  if (req.max_tokens < 1) return invalid_argument("max_tokens must be >= 1");
  if (req.logprobs < -1 || req.logprobs > 20) return invalid_argument("logprobs must be -1 (off) or 0..20");
  TS_RETURN_IF_ERROR(engine::validate(req.sampling));
  for (const auto& [t, b] : req.sampling.logit_bias)
    if (t >= m.n_vocab)
      return invalid_argument("logit_bias: token id " + std::to_string(t) + " out of range [0, " +
                              std::to_string(m.n_vocab) + ")");
  if (!cb) return invalid_argument("no callback");

  int64_t max_tokens = std::min(req.max_tokens, m.max_seq_len - n_prompt);
  if (m.opts.max_output_tokens > 0) max_tokens = std::min(max_tokens, m.opts.max_output_tokens);
  const int64_t arrival = m.clock->now_ns();
  RequestId id = 0;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.stopping) return unavailable("the service is shut down");
    if (m.draining) return unavailable("the service is draining");
    id = m.next_id++;
    ++m.n_active;
    const bool interrupts = m.interrupting[size_t(req.tier)];
    m.inbox.push_back(Impl::Pending{id, std::move(req), std::move(cb), max_tokens, arrival});
    if (interrupts) m.interrupt.store(true, std::memory_order_relaxed);
  }
  m.wake.notify_one();
  return id;
}

void Service::cancel(RequestId id) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.stopping || id == 0 || id >= m.next_id) return;
    m.cancels.push_back(id);
  }
  m.wake.notify_one();
}

void Service::begin_drain() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->draining = true;
}

bool Service::wait_idle(int64_t timeout_ms) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lk(m.mu);
  return m.idle.wait_for(lk, std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)),
                         [&] { return m.n_active == 0; });
}

void Service::shutdown() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.stopped) return;
    m.stopping = true;
    m.stopped = true;
  }
  m.wake.notify_all();
  // From a callback (the loop thread itself) the loop ends after this iteration and the
  // destructor's call joins it.
  if (std::this_thread::get_id() == m.thread.get_id()) {
    std::lock_guard<std::mutex> lk(m.mu);
    m.stopped = false;
    return;
  }
  if (m.thread.joinable()) m.thread.join();
}

Stats Service::stats() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mu);
  Stats s;
  s.draining = m.draining || m.stopping;
  s.n_active = m.n_active;
  s.n_steps = m.n_steps;
  s.n_interrupted = m.n_interrupted;
  s.n_drafted = m.n_drafted;
  s.n_draft_accepted = m.n_draft_accepted;
  s.n_engine_seqs = m.n_engine_seqs;
  s.n_running = std::min(m.n_running, m.n_active);
  s.n_forced_exclusive = m.n_forced_exclusive;
  s.kv = m.kv;
  s.step_cost = m.cost_now;
  s.step_cost_scale = m.cost_scale;
  s.step_token_budget = m.tiers_cfg.step_token_budget;
  s.wait_bound_ns = m.wait_bounds;
  return s;
}

const tok::Tokenizer& Service::tokenizer() const { return impl_->tok; }
const tok::ChatTemplate& Service::chat_template() const { return impl_->chat; }
const engine::Model& Service::model() const { return impl_->model; }
const sched::SchedConfig& Service::sched_config() const { return impl_->tiers_cfg; }
int64_t Service::max_seq_len() const { return impl_->max_seq_len; }

}  // namespace ts::serving
