// The engine-loop thread: inbox -> scheduler -> engine -> callbacks -> scheduler, one
// iteration per engine step. Everything here runs on that thread; the front (service.cc)
// only touches the fields guarded by Impl::mu.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include "core/log.h"
#include "draft.h"
#include "service_impl.h"

namespace ts::serving {

namespace {

constexpr int64_t kCorrelationInterval_ns = 1'000'000'000;

}  // namespace

// --- helpers --------------------------------------------------------------------------

RequestState* Service::Impl::find(RequestId id) {
  auto it = reqs.find(id);
  return it == reqs.end() ? nullptr : it->second.get();
}

void Service::Impl::deliver(RequestState& r, const Update& u) {
  if (r.ended) return;  // nothing after the final update
  try {
    r.cb(u);
  } catch (const std::exception& e) {  // a callback's bug must not take the loop down
    TS_LOG_ERROR("serving: callback of request %llu threw: %s", (unsigned long long)r.id, e.what());
  } catch (...) {
    TS_LOG_ERROR("serving: callback of request %llu threw", (unsigned long long)r.id);
  }
}

void Service::Impl::release_active(int64_t n) {
  {
    // The engine snapshot moves with n_active, so whoever sees a request end (wait_idle)
    // also sees its KV released.
    std::lock_guard<std::mutex> lk(mu);
    n_active -= n;
    n_engine_seqs = engine->n_seqs();
    kv = kv_snapshot();
  }
  idle.notify_all();
}

engine::KvStats Service::Impl::kv_snapshot() const {
  const kv::BlockPool& pool = sched->kv().pool();
  engine::KvStats k;
  k.block_size = pool.block_size();
  k.total = pool.n_blocks();
  k.used = pool.n_used();
  k.cached = pool.n_cached();
  k.free = pool.n_free();
  k.bytes = engine->kv_stats().bytes;
  return k;
}

void Service::Impl::end(RequestId id, Update u) {
  auto it = reqs.find(id);
  if (it == reqs.end()) return;
  std::unique_ptr<RequestState> r = std::move(it->second);
  reqs.erase(it);
  if (engine->contains(id)) (void)engine->remove(id);
  const int64_t now = clock->now_ns();
  u.id = id;
  if (u.tier_requested < 0) u.tier_requested = r->req.tier;
  if (u.tier_served < 0) u.tier_served = r->tier_served;
  u.usage.prompt_tokens = int64_t(r->req.prompt.size());
  u.usage.completion_tokens = r->n_generated;
  u.usage.cached_prompt_tokens = r->n_cached_prompt;
  u.timings.e2e_ns = now - r->arrival_ns;
  u.timings.queue_ns = (r->first_step_ns >= 0 ? r->first_step_ns : now) - r->arrival_ns;
  u.timings.ttft_ns = r->first_token_ns >= 0 ? r->first_token_ns - r->arrival_ns : 0;
  u.timings.n_preemptions = r->n_preemptions;
  u.timings.steps_behind = r->steps_behind;
  u.timings.steps_behind_after_max_wait = r->steps_behind_late;
  deliver(*r, u);
  r->ended = true;
  release_active(1);
}

void Service::Impl::end_failed(RequestId id, Outcome outcome, sched::Reason reason, const std::string& message) {
  RequestState* r = find(id);
  if (!r) return;
  metrics.request(r->tier_served, outcome);
  if (outcome == Outcome::kRejected) metrics.degradation(r->req.tier, -1, reason);
  Update u;
  u.kind = Update::Kind::kFailed;
  u.accepted = true;
  u.reason = reason;
  u.message = message;
  end(id, std::move(u));
}

void Service::Impl::end_done(RequestState& r, EndKind why) {
  const int label = r.tier_served;
  const int64_t now = clock->now_ns();
  metrics.request(label, Outcome::kOk);
  metrics.duration(label, now - r.arrival_ns);
  if (r.n_generated > 1 && r.first_token_ns >= 0) metrics.tpot(label, (now - r.first_token_ns) / (r.n_generated - 1));
  Update u;
  u.kind = Update::Kind::kDone;
  u.accepted = true;
  u.finish_reason = why == EndKind::kLength ? "length" : "stop";
  u.logprobs = std::move(r.pending_logprobs);
  r.pending_logprobs.clear();
  end(r.id, std::move(u));
}

void Service::Impl::tier_gauges(const std::vector<int64_t>* tokens_by_label, double step_tokens) {
  // Per tier label (in FIFO mode the scheduler's one tier would hide the labels).
  std::vector<int64_t> queued(tier_names.size(), 0), running(tier_names.size(), 0), blocks(tier_names.size(), 0);
  for (const auto& [id, r] : reqs) {
    const std::optional<sched::RequestInfo> info = sched->info(id);
    if (!info) continue;
    const size_t label = size_t(r->tier_served);
    if (info->state == sched::RequestState::kRunning) ++running[label];
    else ++queued[label];
    blocks[label] += info->n_blocks;
  }
  for (size_t t = 0; t < tier_names.size(); ++t) {
    std::optional<double> share;
    if (tokens_by_label) share = step_tokens > 0 ? double((*tokens_by_label)[t]) / step_tokens : 0.0;
    metrics.tier_gauges(int(t), queued[t], running[t], blocks[t], share);
  }
}

void Service::Impl::publish() {
  int64_t running = 0;
  for (sched::TierId t = 0; t < sched->n_tiers(); ++t) running += sched->running(t);
  std::lock_guard<std::mutex> lk(mu);
  n_engine_seqs = engine->n_seqs();
  n_running = running;
  kv = kv_snapshot();
}

void Service::Impl::publish_cost() {
  std::vector<std::pair<sched::TierId, int64_t>> bounds;
  for (sched::TierId t = 0; t < sched->n_tiers(); ++t)
    if (auto b = sched->wait_bound_ns(t)) bounds.emplace_back(t, *b);
  for (const auto& [tier, ns] : bounds) metrics.wait_bound(tier, ns);
  const sched::StepCost c = cost->current();
  if (c.measured()) metrics.step_cost(c.fixed_ns, c.token_ns, c.output_ns);
  std::lock_guard<std::mutex> lk(mu);
  cost_now = cost->current();
  cost_scale = cost->scale();
  wait_bounds = std::move(bounds);
}

// --- the inbox ------------------------------------------------------------------------

void Service::Impl::admit(std::vector<Pending>& in) {
  for (Pending& p : in) {
    sched::Request q;
    q.id = p.id;
    q.tier = opts.fifo ? sched::TierId(0) : p.req.tier;  // submit() checked the rank
    q.n_prompt_tokens = int64_t(p.req.prompt.size());
    q.max_output_tokens = p.max_tokens;
    q.preemption_budget = p.req.preemption_budget;
    q.tokens = p.req.prompt;  // the scheduler finds cached prefixes by them
    q.isolation_key = p.req.isolation_key;
    const sched::Decision d = sched->submit(q, p.arrival_ns);

    Update u;
    u.kind = Update::Kind::kAdmitted;
    u.id = p.id;
    u.accepted = d.accepted;
    u.tier_requested = p.req.tier;
    // FIFO mode: one scheduler tier, but the request keeps its label.
    u.tier_served = opts.fifo ? p.req.tier : d.tier_served;
    u.reason = d.reason;
    u.message = d.text;
    u.retry_after_ms = d.retry_after_ms;
    if (!d.accepted) {
      metrics.request(p.req.tier, Outcome::kRejected);
      metrics.degradation(p.req.tier, -1, u.reason);
      try {
        p.cb(u);
      } catch (...) {
        TS_LOG_ERROR("serving: callback of request %llu threw", (unsigned long long)p.id);
      }
      release_active(1);
      continue;
    }
    auto r = std::make_unique<RequestState>(p.id, std::move(p.req), std::move(p.cb), tok, p.arrival_ns, p.max_tokens);
    r->tier_served = u.tier_served;
    r->admitted = true;
    RequestState& ref = *r;
    reqs.emplace(p.id, std::move(r));
    if (u.tier_served != u.tier_requested) {
      metrics.request(u.tier_served, Outcome::kDowngraded);
      metrics.degradation(u.tier_requested, u.tier_served, u.reason);
    }
    deliver(ref, u);
  }
}

void Service::Impl::apply_cancels(const std::vector<RequestId>& ids) {
  for (RequestId id : ids) {
    if (!find(id)) continue;  // unknown or already ended: a no-op
    (void)sched->cancel(id);
    end_failed(id, Outcome::kCancelled, sched::Reason::kCancelled, "cancelled by the client");
  }
}

// --- scheduler decisions ----------------------------------------------------------------

void Service::Impl::apply_events(const sched::Plan& plan) {
  for (const sched::Event& e : plan.events) {
    RequestState* r = find(e.id);
    if (!r) continue;  // ended here already (cancel, finish, engine error)
    switch (e.kind) {
      case sched::EventKind::kPromoted:
      case sched::EventKind::kDowngraded: {
        const bool promoted = e.kind == sched::EventKind::kPromoted;
        const sched::TierId served = opts.fifo ? r->tier_label : e.to_tier;
        r->tier_served = served;
        metrics.request(served, promoted ? Outcome::kPromoted : Outcome::kDowngraded);
        if (!promoted) metrics.degradation(r->req.tier, served, e.reason);
        Update u;
        u.kind = Update::Kind::kTierChanged;
        u.id = e.id;
        u.accepted = true;
        u.tier_requested = r->req.tier;
        u.tier_served = served;
        u.reason = e.reason;
        u.message = e.text;
        deliver(*r, u);
        break;
      }
      case sched::EventKind::kPreempted: {
        ++r->n_preemptions;
        metrics.request(r->tier_served, Outcome::kPreempted);
        Update u;
        u.kind = Update::Kind::kPreempted;
        u.id = e.id;
        u.accepted = true;
        u.tier_requested = r->req.tier;
        u.tier_served = r->tier_served;
        u.reason = e.reason;
        u.message = e.text;
        deliver(*r, u);
        break;
      }
      case sched::EventKind::kRejected:
        end_failed(e.id, Outcome::kRejected, e.reason, e.text);
        break;
      case sched::EventKind::kFailed:
        end_failed(e.id, Outcome::kError, e.reason, e.text);
        break;
      case sched::EventKind::kFinished:
        // The loop ends requests when their last token arrives, before the scheduler
        // does; a finish it did not see still gets its final update.
        end_done(*r, EndKind::kLength);
        break;
      case sched::EventKind::kCancelled:
        end_failed(e.id, Outcome::kCancelled, sched::Reason::kCancelled, e.text);
        break;
    }
  }
}

// --- one step ---------------------------------------------------------------------------

// The engine's log-probabilities with the tokens as text.
TokenLogprob Service::Impl::token_logprob(const engine::OutputLogprob& lp) const {
  TokenLogprob out;
  out.token = tok.token_to_piece(lp.token);
  out.logprob = lp.logprob;
  for (const auto& [id, l] : lp.top) out.top.push_back({tok.token_to_piece(id), l});
  return out;
}

// A rejected draft costs a row of compute for nothing, so the draft length follows what
// the request accepts: all -> one more next time; some -> one more than accepted; none ->
// halve it and skip drafting for a while (1, 2, 4 .. 16 steps while nothing is accepted).
void Service::Impl::adapt_drafts(RequestState& r, int64_t drafted, int64_t accepted) {
  if (accepted == drafted) {
    r.spec_k = std::min(opts.spec_max_drafts, r.spec_k + 1);
  } else if (accepted > 0) {
    r.spec_k = std::max<int32_t>(1, int32_t(accepted) + 1);
  } else {
    r.spec_k = std::max(1, r.spec_k / 2);
    r.spec_cooldown = r.spec_backoff;
    r.spec_backoff = std::min(16, r.spec_backoff * 2);
  }
  if (accepted > 0) r.spec_backoff = 1;
}

// Speculative decoding of a decode entry (its tier has `speculative`): prompt-lookup
// drafts after the last sampled token, verified by the engine in this step. Bounded by
// the tokens the request may still generate, the context, and the KV block the decode
// writes into (drafts never take a block the scheduler did not allocate for the entry).
void Service::Impl::add_drafts(RequestState& r, const sched::PlanEntry& e, engine::SeqStep& s) {
  if (opts.spec_max_drafts <= 0) return;
  if (r.spec_cooldown > 0) {
    --r.spec_cooldown;
    return;
  }
  const int64_t n_known = int64_t(r.known.size());
  const int64_t cells = int64_t(e.blocks.size()) * sched->config().kv_block_size - (e.pos0 + 1);
  const int64_t room = std::min<int64_t>({int64_t(std::min(opts.spec_max_drafts, r.spec_k)),
                                          r.max_tokens - r.n_generated - 1, max_seq_len - n_known, cells});
  if (room <= 0) return;
  DraftOptions d;
  d.max_drafts = int32_t(room);
  d.max_ngram = opts.spec_max_ngram;
  d.min_ngram = opts.spec_min_ngram;
  std::vector<int32_t> drafts = propose_drafts(r.known, d);
  if (drafts.empty()) return;
  s.tokens.insert(s.tokens.end(), drafts.begin(), drafts.end());
  s.n_outputs = int32_t(s.tokens.size());
  s.speculative = true;
}

// Translate: the scheduler planned counts and allocated the blocks; the tokens are ours.
// Entries that cannot run (a request gone, an engine refusal, nothing left) are answered
// kInvalid in `up` at once.
Service::Impl::Translated Service::Impl::translate(const sched::Plan& plan, sched::StepUpdate& up, Ends& ends) {
  Translated t;
  for (const sched::PlanEntry& e : plan.entries) {
    RequestState* r = find(e.id);
    std::string error;
    if (!r) {
      error = "no such request";
    } else if (!engine->contains(e.id)) {  // new: its sampler (the KV is the scheduler's)
      const Status st = engine->add(e.id, engine::SeqConfig{r->req.sampling, r->req.isolation_key});
      if (!st.is_ok()) error = st.message();
    }
    // A start at pos0 > 0 reuses that much of the prefix cache (the scheduler found it).
    if (r && error.empty() && !r->computed_once)
      r->n_cached_prompt = std::min<int64_t>(e.pos0, int64_t(r->req.prompt.size()));
    const int64_t n_known = r ? int64_t(r->known.size()) : 0;
    const int64_t from = e.pos0;
    const int64_t to = std::min(from + e.n_tokens, n_known);
    if (error.empty() && to <= from) error = "nothing left to compute";
    if (!error.empty()) {
      sched::RequestResult rr;
      rr.id = e.id;
      rr.outcome = sched::StepOutcome::kInvalid;
      up.requests.push_back(rr);
      if (r) ends.push_back([this, id = e.id, error] { end_failed(id, Outcome::kError, sched::Reason::kEngineError, error); });
      continue;
    }
    engine::SeqStep s;
    s.seq = e.id;
    s.tokens.assign(r->known.begin() + from, r->known.begin() + to);
    t.step_pairs += sched::StepCost::pairs(to - from, from);
    s.n_outputs = to == n_known ? 1 : 0;
    if (e.speculative && e.kind == sched::EntryKind::kContinue && to == n_known && to - from == 1)
      add_drafts(*r, e, s);
    s.logprobs = s.n_outputs > 0 ? r->req.logprobs : -1;
    t.sp.seqs.push_back(std::move(s));
    t.sp.kv.push_back(engine::SeqKv{from, e.blocks, r->known});
    t.planned.push_back(&e);
  }
  for (const auto& c : plan.copies) t.sp.copies.push_back(c);
  t.sp.interruptible = plan.interruptible;
  return t;
}

// Apply: one entry's engine result to its request (tokens out, the end, a refusal) and
// to the scheduler's update.
void Service::Impl::apply_result(const sched::PlanEntry& e, const engine::SeqStep& ss, const engine::SeqResult& sr, int64_t now,
                                 int64_t t_done, std::vector<int64_t>& tokens_by_label, sched::StepUpdate& up, Ends& ends) {
  RequestState& r = *find(e.id);
  sched::RequestResult rr;
  rr.id = e.id;
  rr.n_computed = sr.n_computed;
  switch (sr.outcome) {
    case engine::SeqOutcome::kOk: {
      const int label = r.tier_served;
      tokens_by_label[size_t(label)] += int64_t(ss.tokens.size());
      if (!r.computed_once) {
        r.computed_once = true;
        r.first_step_ns = now;
        metrics.prefix_cache(int64_t(r.req.prompt.size()), r.n_cached_prompt);
        if (const auto info = sched->info(e.id); info && sched->tier(info->tier_served).config().interrupt) {
          r.steps_behind = info->steps_behind;
          r.steps_behind_late = info->steps_behind_after_max_wait;
        }
        metrics.queue_time(label, now - r.arrival_ns);
        metrics.tokens_in(label, int64_t(r.req.prompt.size()));
      }
      if (sr.sampled.empty()) break;
      // One sampled token, or several after speculative verification (accepted
      // drafts plus the token after them): all go out in one delta.
      EndKind why = EndKind::kNone;
      std::string text;
      for (size_t j = 0; j < sr.sampled.size(); ++j) {
        const int32_t t = sr.sampled[j];
        if (r.req.logprobs >= 0 && j < sr.logprobs.size()) r.pending_logprobs.push_back(token_logprob(sr.logprobs[j]));
        text += r.push_token(t, &why);
        rr.sampled.push_back(t);
        ++rr.n_sampled;
        ++r.n_undelivered;
        if (why != EndKind::kNone) break;
      }
      metrics.tokens_out(label, rr.n_sampled);
      if (ss.speculative) {
        const int64_t drafted = int64_t(ss.tokens.size()) - 1, accepted = int64_t(sr.sampled.size()) - 1;
        adapt_drafts(r, drafted, accepted);
        metrics.speculative(label, drafted, accepted);
        std::lock_guard<std::mutex> lk(mu);
        n_drafted += drafted;
        n_draft_accepted += accepted;
      }
      if (r.first_token_ns < 0) {
        r.first_token_ns = t_done;
        metrics.ttft(label, t_done - r.arrival_ns);
      }
      if (!text.empty()) {
        Update u;
        u.kind = Update::Kind::kDelta;
        u.id = e.id;
        u.text = std::move(text);
        u.n_tokens = r.n_undelivered;
        u.logprobs = std::move(r.pending_logprobs);
        r.pending_logprobs.clear();
        r.n_undelivered = 0;
        deliver(r, u);
      }
      if (why != EndKind::kNone) {
        rr.finished = true;
        ends.push_back([this, &r, why] { end_done(r, why); });  // r is gone after this
      }
      break;
    }
    case engine::SeqOutcome::kInterrupted:
      rr.outcome = sched::StepOutcome::kInterrupted;  // nothing happened; planned again
      break;
    case engine::SeqOutcome::kNoRoom:  // the scheduler allocated every entry's blocks
    case engine::SeqOutcome::kInvalid: {
      rr.outcome = sched::StepOutcome::kInvalid;
      const std::string error = sr.outcome == engine::SeqOutcome::kNoRoom ? "the engine had no room" : sr.error;
      ends.push_back([this, id = e.id, error] { end_failed(id, Outcome::kError, sched::Reason::kEngineError, error); });
      break;
    }
  }
  up.requests.push_back(rr);
}

bool Service::Impl::step_once() {
  const int64_t now = clock->now_ns();
  sched::Plan plan = sched->schedule(now);  // preemptions freed their KV already
  apply_events(plan);
  metrics.priority_inversions(plan.n_priority_inversions);

  sched::StepUpdate up;
  Ends ends;
  Translated tr = translate(plan, up, ends);
  engine::StepPlan& sp = tr.sp;
  const std::vector<const sched::PlanEntry*>& planned = tr.planned;
  const double step_pairs = tr.step_pairs;
  std::vector<int64_t> tokens_by_label(tier_names.size(), 0);
  if (!sp.seqs.empty()) {
    const engine::StepResult res = engine->step(sp);
    if (res.stats.interrupted) {
      metrics.step_interrupted();
      std::lock_guard<std::mutex> lk(mu);
      ++n_interrupted;
    } else if (cost->current().measured()) {
      // What the machine does now corrects the calibration the scheduler predicts with.
      cost->observe(res.stats.n_tokens, res.stats.n_outputs, step_pairs, res.stats.time_ns);
      sched->set_step_cost(cost->current());
      if (n_steps % 64 == 0) publish_cost();
    }
    if (plan.exclusive_forced) {
      metrics.step_forced_exclusive();
      std::lock_guard<std::mutex> lk(mu);
      ++n_forced_exclusive;
    }
    const int64_t t_done = clock->now_ns();
    for (size_t i = 0; i < res.seqs.size() && i < planned.size(); ++i)
      apply_result(*planned[i], sp.seqs[i], res.seqs[i], now, t_done, tokens_by_label, up, ends);
  }
  if (const Status st = sched->update(plan, up); !st.is_ok())
    TS_LOG_ERROR("serving: scheduler update: %s", st.to_string().c_str());
  for (const auto& end_it : ends) end_it();

  // Share of the step: of the budget, or of all tokens when bursts took the step past it.
  tier_gauges(&tokens_by_label, double(std::max(plan.token_budget, plan.n_tokens())));
  metrics.tick(now, kCorrelationInterval_ns);
  if (sp.seqs.empty()) return false;
  std::lock_guard<std::mutex> lk(mu);
  ++n_steps;
  return true;
}

// Requests not started yet hear that they still wait, every wait_notice_ms.
void Service::Impl::notify_waiting() {
  if (opts.wait_notice_ms <= 0) return;
  const int64_t now = clock->now_ns(), every = opts.wait_notice_ms * 1'000'000;
  for (auto& [id, r] : reqs) {
    if (r->computed_once) continue;
    const int64_t since = r->last_notice_ns >= 0 ? r->last_notice_ns : r->arrival_ns;
    if (now - since < every) continue;
    r->last_notice_ns = now;
    Update u;
    u.kind = Update::Kind::kWaiting;
    u.id = id;
    u.accepted = true;
    u.tier_requested = r->req.tier;
    u.tier_served = r->tier_served;
    deliver(*r, u);
  }
}

// --- the thread ---------------------------------------------------------------------------

void Service::Impl::shutdown_all(std::vector<Pending>& in) {
  for (Pending& p : in) {
    Update u;
    u.kind = Update::Kind::kAdmitted;
    u.id = p.id;
    u.accepted = false;
    u.tier_requested = p.req.tier;
    u.tier_served = p.req.tier;
    u.reason = sched::Reason::kOverloaded;  // the server's 503: try again elsewhere
    u.message = "the service is shutting down";
    u.retry_after_ms = 1000;
    try {
      p.cb(u);
    } catch (...) {
      TS_LOG_ERROR("serving: callback of request %llu threw", (unsigned long long)p.id);
    }
    release_active(1);
  }
  std::vector<RequestId> ids;
  for (const auto& kv : reqs) ids.push_back(kv.first);
  std::sort(ids.begin(), ids.end());
  for (RequestId id : ids) {
    (void)sched->cancel(id);
    end_failed(id, Outcome::kCancelled, sched::Reason::kShutdown, "the service is shutting down");
  }
  publish();
}

void Service::Impl::run() {
  const auto poll = std::chrono::milliseconds(opts.idle_poll_ms);
  for (;;) {
    std::vector<Pending> in;
    std::vector<RequestId> cx;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lk(mu);
      if (!stopping && inbox.empty() && cancels.empty() && reqs.empty()) wake.wait_for(lk, poll);
      interrupt.store(false, std::memory_order_relaxed);  // what raised it is in `in` now
      in.swap(inbox);
      cx.swap(cancels);
      stop = stopping;
    }
    if (stop) {
      shutdown_all(in);
      return;
    }
    admit(in);
    apply_cancels(cx);
    // When a cancel (a client gone mid-stream) or a refusal leaves the service idle, no
    // step follows to refresh the tier gauges: they would keep the last step's counts. They
    // are set before publish(), so whoever sees n_engine_seqs fall to 0 sees them too.
    if (reqs.empty() && (!in.empty() || !cx.empty())) tier_gauges(nullptr, 0.0);
    publish();
    if (reqs.empty()) continue;
    notify_waiting();
    const bool progressed = step_once();
    publish();
    if (!progressed) {
      // Work that cannot move now (waiting on KV or a timeout): sleep until something
      // arrives or the poll interval passes.
      std::unique_lock<std::mutex> lk(mu);
      if (!stopping && inbox.empty() && cancels.empty()) wake.wait_for(lk, poll);
    }
  }
}

}  // namespace ts::serving
